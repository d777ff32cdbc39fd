# The KR260's SFP+ cage at 10GBASE-R for an EthNode top (hw/eth/eth_node.py): one GTH channel
# in raw mode from the free transceiver wizard (gtwizard_ultrascale), everything above it (our
# gearbox, PCS, MAC) in the node.  `mcf board build --network sfp` writes this file, the GT
# module mcf_eth10g_gt.v, the RTL top mcf_top.v and eth.tcl (which sources this file; build.tcl
# calls its mcf_eth_connect gt_tx gt_rx in the block design and mcf_eth_top for the top) into
# the build folder (boards/kr260/eth10g.py).
#
#   mcf_eth10g_ip  channel refclk_source refclk_mhz freerun_mhz
#       create the wizard IP (RTL, module mcf_gth_10g): 10.3125 Gb/s from a refclk_mhz
#       reference (QPLL0, refclk_source clk0/clk1 of the channel's quad), raw 64-bit user data
#       (32-bit internal: TXUSRCLK 322 MHz, TXUSRCLK2 161.13 MHz), no 8b/10b or 64b/66b in the
#       GT, on channel `channel` (the wizard's XnYm of GTHE4_CHANNEL_XnYm; the KR260's cage is
#       X0Y6), its reset controller clocked by a free-running freerun_mhz clock.
#   mcf_eth10g_connect node tx rx freerun_clk reset_n
#       export the node's GT side from the block design as ports, which the RTL top mcf_top.v
#       (mcf_eth10g_top) joins to the GT module mcf_eth10g_gt (the wizard core, its reference
#       clock buffer, the resets of its user-clock domains).  The wizard cannot sit inside the
#       block design: a module reference may not instantiate it (UG994: gtwizard does not
#       support module reference) and it is not a block-design IP here, so like Corundum's KR260
#       target the transceiver lives in RTL beside the block design.  Ports:
#         node/$tx -> gt_tx (64 bits);  gt_rx -> node/$rx
#         eth_tx_clk, eth_tx_rst, eth_rx_clk, eth_rx_rst (the GT's user clocks and their
#           active-high resets) -> node
#         $freerun_clk -> gt_freerun_clk, $reset_n -> gt_reset_n (the wizard's reset controller)
#         sfp_mod_abs, sfp_rx_los, sfp_tx_fault -> node;  node/sfp_tx_disable -> sfp_tx_disable
#       `freerun_clk` is a bd pin of a stable clock (the PS's pl_clk0), `reset_n` an active-low
#       reset pin in that clock's domain.
#   mcf_eth10g_top
#       add mcf_eth10g_gt.v and mcf_top.v to the sources; return the top module's name.

proc mcf_eth10g_ip {channel refclk_source refclk_mhz freerun_mhz} {
  create_ip -name gtwizard_ultrascale -vendor xilinx.com -library ip -module_name mcf_gth_10g
  set ip [get_ips mcf_gth_10g]
  set_property -dict [list CONFIG.preset {GTH-10GBASE-R}] $ip
  set_property -dict [list \
    CONFIG.CHANNEL_ENABLE $channel \
    CONFIG.TX_MASTER_CHANNEL $channel \
    CONFIG.RX_MASTER_CHANNEL $channel \
    CONFIG.TX_LINE_RATE {10.3125} \
    CONFIG.RX_LINE_RATE {10.3125} \
    CONFIG.TX_PLL_TYPE {QPLL0} \
    CONFIG.RX_PLL_TYPE {QPLL0} \
    CONFIG.TX_REFCLK_FREQUENCY $refclk_mhz \
    CONFIG.RX_REFCLK_FREQUENCY $refclk_mhz \
    CONFIG.TX_DATA_ENCODING {RAW} \
    CONFIG.RX_DATA_DECODING {RAW} \
    CONFIG.TX_USER_DATA_WIDTH {64} \
    CONFIG.TX_INT_DATA_WIDTH {32} \
    CONFIG.RX_USER_DATA_WIDTH {64} \
    CONFIG.RX_INT_DATA_WIDTH {32} \
    CONFIG.TX_REFCLK_SOURCE [list $channel $refclk_source] \
    CONFIG.RX_REFCLK_SOURCE [list $channel $refclk_source] \
    CONFIG.FREERUN_FREQUENCY $freerun_mhz \
    CONFIG.LOCATE_TX_USER_CLOCKING {CORE} \
    CONFIG.LOCATE_RX_USER_CLOCKING {CORE} \
    CONFIG.LOCATE_RESET_CONTROLLER {CORE} \
    CONFIG.LOCATE_COMMON {CORE} \
  ] $ip
  generate_target all $ip
}

proc mcf_eth10g_connect {node tx rx freerun_clk reset_n} {
  create_bd_port -dir O -from 63 -to 0 gt_tx
  create_bd_port -dir I -from 63 -to 0 gt_rx
  connect_bd_net [get_bd_pins $node/$tx] [get_bd_ports gt_tx]
  connect_bd_net [get_bd_ports gt_rx] [get_bd_pins $node/$rx]
  foreach d {tx rx} {
    create_bd_port -dir I -type rst eth_${d}_rst
    set_property CONFIG.POLARITY {ACTIVE_HIGH} [get_bd_ports eth_${d}_rst]
    create_bd_port -dir I -type clk eth_${d}_clk
    set_property -dict [list CONFIG.FREQ_HZ {161132812} CONFIG.ASSOCIATED_RESET eth_${d}_rst] [get_bd_ports eth_${d}_clk]
    connect_bd_net [get_bd_ports eth_${d}_clk] [get_bd_pins $node/eth_${d}_clk]
    connect_bd_net [get_bd_ports eth_${d}_rst] [get_bd_pins $node/eth_${d}_rst]
  }
  create_bd_port -dir O -type clk gt_freerun_clk
  connect_bd_net [get_bd_pins $freerun_clk] [get_bd_ports gt_freerun_clk]
  create_bd_port -dir O -type rst gt_reset_n
  connect_bd_net [get_bd_pins $reset_n] [get_bd_ports gt_reset_n]
  foreach pin {sfp_mod_abs sfp_rx_los sfp_tx_fault} {
    create_bd_port -dir I $pin
    connect_bd_net [get_bd_ports $pin] [get_bd_pins $node/$pin]
  }
  create_bd_port -dir O sfp_tx_disable
  connect_bd_net [get_bd_pins $node/sfp_tx_disable] [get_bd_ports sfp_tx_disable]
}

proc mcf_eth10g_top {} {
  add_files -norecurse [list mcf_eth10g_gt.v mcf_top.v]
  update_compile_order -fileset sources_1
  return mcf_top
}
