# The KR260's SFP+ cage at 10GBASE-R for an EthNode top (hw/eth/eth_node.py): one GTH channel
# in raw mode from the free transceiver wizard (gtwizard_ultrascale), everything above it (our
# gearbox, PCS, MAC) in the node.  Self-contained: `source eth10g.tcl` defines the procs; the
# board flow calls them while it builds the block design (boards/kr260/eth10g.py writes this
# file and mcf_eth10g_gt.v next to build.tcl).
#
#   mcf_eth10g_ip  channel refclk_mhz freerun_mhz
#       create the wizard IP (RTL, module mcf_gth_10g): 10.3125 Gb/s from a refclk_mhz
#       reference, raw 64-bit user data (32-bit internal: TXUSRCLK 322 MHz, TXUSRCLK2
#       161.13 MHz), no 8b/10b or 64b/66b in the GT, on GTHE4 channel `channel` (e.g. X0Y2),
#       its reset controller clocked by a free-running freerun_mhz clock.
#   mcf_eth10g_connect node freerun_clk reset_n
#       add the module reference `gt` (mcf_eth10g_gt.v wrapping mcf_gth_10g) and wire it:
#         board ports sfp_refclk_p/n, sfp_rx_p/n -> gt;  gt -> sfp_tx_p/n
#         gt/gt_tx_usrclk2, gt/gt_tx_reset -> node/eth_tx_clk, node/eth_tx_rst
#         gt/gt_rx_usrclk2, gt/gt_rx_reset -> node/eth_rx_clk, node/eth_rx_rst
#         node/gt_tx -> gt/tx_data;  gt/rx_data -> node/gt_rx
#         board ports sfp_mod_abs, sfp_rx_los, sfp_tx_fault -> node;  node/sfp_tx_disable -> port
#       `freerun_clk` is a bd pin of a stable clock (the PS's pl_clk0), `reset_n` an active-low
#       reset pin in that clock's domain.

proc mcf_eth10g_ip {channel refclk_mhz freerun_mhz} {
  create_ip -name gtwizard_ultrascale -vendor xilinx.com -library ip -module_name mcf_gth_10g
  set ip [get_ips mcf_gth_10g]
  set_property -dict [list CONFIG.preset {GTH-10GBASE-R}] $ip
  set_property -dict [list \
    CONFIG.CHANNEL_ENABLE $channel \
    CONFIG.TX_MASTER_CHANNEL $channel \
    CONFIG.RX_MASTER_CHANNEL $channel \
    CONFIG.TX_LINE_RATE {10.3125} \
    CONFIG.RX_LINE_RATE {10.3125} \
    CONFIG.TX_REFCLK_FREQUENCY $refclk_mhz \
    CONFIG.RX_REFCLK_FREQUENCY $refclk_mhz \
    CONFIG.TX_DATA_ENCODING {RAW} \
    CONFIG.RX_DATA_DECODING {RAW} \
    CONFIG.TX_USER_DATA_WIDTH {64} \
    CONFIG.TX_INT_DATA_WIDTH {32} \
    CONFIG.RX_USER_DATA_WIDTH {64} \
    CONFIG.RX_INT_DATA_WIDTH {32} \
    CONFIG.TX_REFCLK_SOURCE [list $channel clk0] \
    CONFIG.RX_REFCLK_SOURCE [list $channel clk0] \
    CONFIG.FREERUN_FREQUENCY $freerun_mhz \
    CONFIG.LOCATE_TX_USER_CLOCKING {CORE} \
    CONFIG.LOCATE_RX_USER_CLOCKING {CORE} \
    CONFIG.LOCATE_RESET_CONTROLLER {CORE} \
  ] $ip
  generate_target all $ip
}

proc mcf_eth10g_connect {node freerun_clk reset_n} {
  add_files -norecurse mcf_eth10g_gt.v
  update_compile_order -fileset sources_1
  set gt [create_bd_cell -type module -reference mcf_eth10g_gt gt]
  connect_bd_net [get_bd_pins $freerun_clk] [get_bd_pins gt/freerun_clk]
  connect_bd_net [get_bd_pins $reset_n] [get_bd_pins gt/reset_n]
  foreach port {sfp_refclk_p sfp_refclk_n sfp_rx_p sfp_rx_n sfp_mod_abs sfp_rx_los sfp_tx_fault} {
    create_bd_port -dir I $port
  }
  foreach port {sfp_tx_p sfp_tx_n sfp_tx_disable} {
    create_bd_port -dir O $port
  }
  foreach {port pin} {sfp_refclk_p refclk_p sfp_refclk_n refclk_n sfp_rx_p rx_p sfp_rx_n rx_n} {
    connect_bd_net [get_bd_ports $port] [get_bd_pins gt/$pin]
  }
  foreach {pin port} {tx_p sfp_tx_p tx_n sfp_tx_n} {
    connect_bd_net [get_bd_pins gt/$pin] [get_bd_ports $port]
  }
  foreach {from to} {gt_tx_usrclk2 eth_tx_clk gt_tx_reset eth_tx_rst gt_rx_usrclk2 eth_rx_clk
                     gt_rx_reset eth_rx_rst rx_data gt_rx} {
    connect_bd_net [get_bd_pins gt/$from] [get_bd_pins $node/$to]
  }
  connect_bd_net [get_bd_pins $node/gt_tx] [get_bd_pins gt/tx_data]
  foreach pin {sfp_mod_abs sfp_rx_los sfp_tx_fault} {
    connect_bd_net [get_bd_ports $pin] [get_bd_pins $node/$pin]
  }
  connect_bd_net [get_bd_pins $node/sfp_tx_disable] [get_bd_ports sfp_tx_disable]
}
