# MCF on the Kria KR260: block design (PS8 + MCF node), implementation, timing gate, outputs.
#
# Run by `mcf board build` as `vivado -mode batch -source build.tcl` in the folder that holds
# params.tcl, mcf_node.v, mcf_node_top.v and kr260.xdc (all written by `mcf board build`, with
# the overlay mcf.dtbo and shell.json).  Outputs: mcf.bit + mcf.hwh (PYNQ), mcf.bit.bin
# (xmutil / fpgautil), mcf.xsa, utilization.rpt, timing.rpt.  A routed design with negative
# setup or hold slack stops here, before write_bitstream.  Tested without Vivado by
# tests/boards (a strict mock of the Vivado commands and IPs used here).

source params.tcl
set proj mcf_kr260
set bd mcf

proc mcf_step {msg} { puts "MCF: $msg" }

# --- project and board files ----------------------------------------------------------------
mcf_step "creating project for $mcf_part"
create_project -force $proj ./vivado -part $mcf_part
# The KR260 board files give the PS its carrier preset (DDR4, MIO, clocks); without them the
# PS keeps the part defaults, which do not boot the KR260's DDR.  Take the newest installed
# SOM board part and carrier version; never assume one.
set som_parts [get_board_parts -quiet -latest_file_version {*:kr260_som:*}]
if {[llength $som_parts] == 0} {
  error "MCF: KR260 board files not installed (Vivado > Tools > Vivado Store > Boards: Kria KR260 SOM and carrier)"
}
set carriers [lsort -dictionary [get_boards -quiet {*:kr260_carrier:*}]]
if {[llength $carriers] == 0} {
  error "MCF: KR260 carrier board files not installed (Vivado Store > Boards: Kria KR260 carrier)"
}
set carrier_version [lindex [split [lindex $carriers end] :] end]
set_property board_part [lindex $som_parts 0] [current_project]
set_property board_connections [list \
  som240_1_connector xilinx.com:kr260_carrier:som240_1_connector:$carrier_version \
  som240_2_connector xilinx.com:kr260_carrier:som240_2_connector:$carrier_version] [current_project]
mcf_step "board part [lindex $som_parts 0], carrier $carrier_version"
add_files -norecurse [list mcf_node.v mcf_node_top.v]
add_files -fileset constrs_1 -norecurse kr260.xdc
update_compile_order -fileset sources_1

# --- block design ----------------------------------------------------------------------------
mcf_step "block design: PS8 with pl_clk0 = $mcf_pl_clock_mhz MHz, node, interconnect"
create_bd_design $bd
set ps [create_bd_cell -type ip -vlnv xilinx.com:ip:zynq_ultra_ps_e ps]
apply_bd_automation -rule xilinx.com:bd_rule:zynq_ultra_ps_e -config {apply_board_preset "1"} $ps
set_property -dict [list \
  CONFIG.PSU__FPGA_PL0_ENABLE {1} \
  CONFIG.PSU__CRL_APB__PL0_REF_CTRL__SRCSEL {IOPLL} \
  CONFIG.PSU__CRL_APB__PL0_REF_CTRL__FREQMHZ $mcf_pl_clock_mhz \
  CONFIG.PSU__USE__M_AXI_GP0 {1} \
  CONFIG.PSU__MAXIGP0__DATA_WIDTH $mcf_hpm0_data_width \
  CONFIG.PSU__USE__M_AXI_GP1 {0} \
  CONFIG.PSU__USE__M_AXI_GP2 {0} \
  CONFIG.PSU__USE__IRQ0 $mcf_has_irq] $ps
# The node's HP port p (m_axi, m_axi1, ...: NodeConfig.ddr_masters) on its PS port (params.tcl:
# {master p interface gp clock}; HP0..3 = S_AXI_GP2..5, HPC0 = S_AXI_GP0).
foreach link $mcf_hp_links {
  set gp [lindex $link 3]
  set_property -dict [list CONFIG.PSU__USE__S_AXI_GP$gp {1} \
    CONFIG.PSU__SAXIGP${gp}__DATA_WIDTH $mcf_hp_data_width] $ps
}
# The PS makes 1500/n MHz; `mcf board build` derived the clock from that, so anything else here
# means the preset's PLL differs from what the flow assumes: stop rather than build a design
# whose node runs at another clock than its wrapper, overlay and docs say.
set act [get_property CONFIG.PSU__CRL_APB__PL0_REF_CTRL__ACT_FREQMHZ $ps]
if {abs($act - $mcf_pl_clock_mhz) > 1e-3 * $mcf_pl_clock_mhz} {
  error "MCF: the PS makes pl_clk0 = $act MHz, not $mcf_pl_clock_mhz MHz (divisors $mcf_pl_clock_divisors of IOPLL expected)"
}
# The weight loaders' own clock (NodeConfig.weight_clock_hz; 0: none): pl_clk1 = IOPLL / n, the
# node's axi_clk and the clock of its HP ports mcf_weight_hp_ports (their SmartConnects and the PS
# ports' saxihp*_aclk), with its own reset bridge.
if {$mcf_weight_clock_hz} {
  set_property -dict [list \
    CONFIG.PSU__FPGA_PL1_ENABLE {1} \
    CONFIG.PSU__CRL_APB__PL1_REF_CTRL__SRCSEL {IOPLL} \
    CONFIG.PSU__CRL_APB__PL1_REF_CTRL__FREQMHZ $mcf_weight_clock_mhz] $ps
  set act [get_property CONFIG.PSU__CRL_APB__PL1_REF_CTRL__ACT_FREQMHZ $ps]
  if {abs($act - $mcf_weight_clock_mhz) > 1e-3 * $mcf_weight_clock_mhz} {
    error "MCF: the PS makes pl_clk1 = $act MHz, not $mcf_weight_clock_mhz MHz (divisors $mcf_weight_clock_divisors of IOPLL expected)"
  }
}

set node [create_bd_cell -type module -reference mcf_node_top node]
set rst [create_bd_cell -type ip -vlnv xilinx.com:ip:proc_sys_reset rst]
set ctl_ic [create_bd_cell -type ip -vlnv xilinx.com:ip:smartconnect ctl_ic]
set_property -dict [list CONFIG.NUM_SI {1} CONFIG.NUM_MI {1}] $ctl_ic

set clk [get_bd_pins ps/pl_clk0]
connect_bd_net $clk [get_bd_pins rst/slowest_sync_clk] [get_bd_pins node/aclk] \
  [get_bd_pins ps/maxihpm0_fpd_aclk] [get_bd_pins ctl_ic/aclk]
connect_bd_net [get_bd_pins ps/pl_resetn0] [get_bd_pins rst/ext_reset_in]
connect_bd_net [get_bd_pins rst/peripheral_aresetn] [get_bd_pins node/aresetn] [get_bd_pins ctl_ic/aresetn]
if {$mcf_weight_clock_hz} {
  set wrst [create_bd_cell -type ip -vlnv xilinx.com:ip:proc_sys_reset rst_w]
  connect_bd_net [get_bd_pins ps/pl_clk1] [get_bd_pins rst_w/slowest_sync_clk] [get_bd_pins node/axi_clk]
  connect_bd_net [get_bd_pins ps/pl_resetn0] [get_bd_pins rst_w/ext_reset_in]
  connect_bd_net [get_bd_pins rst_w/peripheral_reset] [get_bd_pins node/axi_rst]
}

# PS -> node registers (AXI4-Lite through the SmartConnect's protocol conversion).
connect_bd_intf_net [get_bd_intf_pins ps/M_AXI_HPM0_FPD] [get_bd_intf_pins ctl_ic/S00_AXI]
connect_bd_intf_net [get_bd_intf_pins ctl_ic/M00_AXI] [get_bd_intf_pins node/s_axil]

# Node DMA masters -> DDR: the node's HP port p straight to its PS port (S_AXI_HP<p>_FPD, p = 4:
# S_AXI_HPC0_FPD) through a 1:1 SmartConnect (ID / address width adaptation), each its own 4 GB/s
# path towards the DDR controller (not cache-coherent: the runtime flushes and invalidates).
# Weight loader k is alone on HP port k (NodeConfig.ddr_masters; docs/node.md "HP ports").
foreach link $mcf_hp_links {
  lassign $link m p intf gp pclk
  set ic [create_bd_cell -type ip -vlnv xilinx.com:ip:smartconnect mem_ic$p]
  set_property -dict [list CONFIG.NUM_SI {1} CONFIG.NUM_MI {1}] $ic
  if {$p in $mcf_weight_hp_ports} {
    connect_bd_net [get_bd_pins ps/pl_clk1] [get_bd_pins mem_ic$p/aclk] [get_bd_pins ps/$pclk]
    connect_bd_net [get_bd_pins rst_w/peripheral_aresetn] [get_bd_pins mem_ic$p/aresetn]
  } else {
    connect_bd_net $clk [get_bd_pins mem_ic$p/aclk] [get_bd_pins ps/$pclk]
    connect_bd_net [get_bd_pins rst/peripheral_aresetn] [get_bd_pins mem_ic$p/aresetn]
  }
  connect_bd_intf_net [get_bd_intf_pins node/$m] [get_bd_intf_pins mem_ic$p/S00_AXI]
  connect_bd_intf_net [get_bd_intf_pins mem_ic$p/M00_AXI] [get_bd_intf_pins ps/$intf]
}

if {$mcf_has_irq} { connect_bd_net [get_bd_pins node/irq] [get_bd_pins ps/pl_ps_irq0] }

# Board pins (constrained by kr260.xdc): LEDs show reset released / interrupt, the fan runs.
create_bd_port -dir O led0
create_bd_port -dir O led1
create_bd_port -dir O fan_en_b
connect_bd_net [get_bd_pins rst/peripheral_aresetn] [get_bd_ports led0]
if {$mcf_has_irq} {
  connect_bd_net [get_bd_pins node/irq] [get_bd_ports led1]
} else {
  set led_off [create_bd_cell -type ip -vlnv xilinx.com:ip:xlconstant led_off]
  set_property -dict [list CONFIG.CONST_VAL {0} CONFIG.CONST_WIDTH {1}] $led_off
  connect_bd_net [get_bd_pins led_off/dout] [get_bd_ports led1]
}
set fan_on [create_bd_cell -type ip -vlnv xilinx.com:ip:xlconstant fan_on]
set_property -dict [list CONFIG.CONST_VAL {0} CONFIG.CONST_WIDTH {1}] $fan_on
connect_bd_net [get_bd_pins fan_on/dout] [get_bd_ports fan_en_b]

# Network ports: looped back (single-board bring-up: every packet a node sends on port p comes
# back on port p) or, for port 0, the SFP+ cage through eth.tcl (issue 16: an EthNode's GT link
# and the GTH wizard; `mcf board build --network sfp` writes it).  eth.tcl defines
# mcf_eth_connect {tx rx}, which wires node/$tx and node/$rx towards the cage, and may define
# mcf_eth_top {wrapper}, which adds an RTL top around the block design and returns its name.
set first 1
foreach link $mcf_net_links {
  lassign $link tx rx
  if {$mcf_network eq "sfp" && $first} {
    mcf_step "network port $tx/$rx on the SFP+ cage (10GBASE-R)"
    source eth.tcl
    mcf_eth_connect $tx $rx
  } else {
    connect_bd_intf_net [get_bd_intf_pins node/$tx] [get_bd_intf_pins node/$rx]
  }
  set first 0
}

# The node's registers at the address the runtime and the overlay use.
assign_bd_address -offset $mcf_regs_base -range $mcf_regs_size \
  -target_address_space [get_bd_addr_spaces ps/Data] [get_bd_addr_segs node/s_axil/reg0] -force
if {[llength $mcf_hp_links] > 0} { assign_bd_address }
validate_bd_design
# The node's clock rate as the block design propagated it from pl_clk0 (the wrapper states none:
# the PS's IOPLL/n is 1499.985/n MHz, not a round number).  It must be the flow's PL clock.
set node_hz [get_property CONFIG.FREQ_HZ [get_bd_pins node/aclk]]
if {abs($node_hz - $mcf_pl_clock_hz) > 1e-3 * $mcf_pl_clock_hz} {
  error "MCF: the node's clock is $node_hz Hz, not $mcf_pl_clock_hz Hz"
}
if {$mcf_weight_clock_hz} {
  set w_hz [get_property CONFIG.FREQ_HZ [get_bd_pins node/axi_clk]]
  if {abs($w_hz - $mcf_weight_clock_hz) > 1e-3 * $mcf_weight_clock_hz} {
    error "MCF: the weight loaders' clock is $w_hz Hz, not $mcf_weight_clock_hz Hz"
  }
  mcf_step "weight loaders' clock $w_hz Hz (pl_clk1, HP ports $mcf_weight_hp_ports)"
}
mcf_step "node clock $node_hz Hz (pl_clk0 = IOPLL / [expr {[lindex $mcf_pl_clock_divisors 0] * [lindex $mcf_pl_clock_divisors 1]}])"
save_bd_design

# --- implementation and the timing gate --------------------------------------------------------
set wrapper [make_wrapper -files [get_files $bd.bd] -top]
add_files -norecurse $wrapper
# The device top is the block design's wrapper, unless eth.tcl puts RTL around it (the SFP+ cage's
# transceiver cannot live inside the block design: mcf_eth_top returns an RTL top that holds the
# wrapper and the GT).
set top ${bd}_wrapper
if {[llength [info procs mcf_eth_top]]} { set top [mcf_eth_top $top] }
set_property top $top [current_fileset]
update_compile_order -fileset sources_1

mcf_step "synthesis, placement and routing ($mcf_jobs jobs)"
launch_runs impl_1 -jobs $mcf_jobs
wait_on_run impl_1
if {[get_property PROGRESS [get_runs impl_1]] ne "100%"} {
  error "MCF: implementation failed; see vivado/$proj.runs/impl_1/runme.log"
}
open_run impl_1
report_utilization -file utilization.rpt
report_timing_summary -max_paths 20 -report_unconstrained -file timing.rpt
set run [get_runs impl_1]
set wns [get_property STATS.WNS $run]
set tns [get_property STATS.TNS $run]
set whs [get_property STATS.WHS $run]
set ths [get_property STATS.THS $run]
mcf_step "timing at $mcf_pl_clock_mhz MHz: WNS $wns ns, TNS $tns ns, WHS $whs ns, THS $ths ns"
if {$wns < 0 || $whs < 0} {
  error "MCF: timing not met at $mcf_pl_clock_mhz MHz (WNS $wns ns, WHS $whs ns); no bitstream written; see timing.rpt"
}

mcf_step "bitstream"
launch_runs impl_1 -to_step write_bitstream -jobs $mcf_jobs
wait_on_run impl_1
if {[get_property PROGRESS [get_runs impl_1]] ne "100%"} {
  error "MCF: write_bitstream failed; see vivado/$proj.runs/impl_1/runme.log"
}

# --- outputs -------------------------------------------------------------------------------------
file copy -force vivado/$proj.runs/impl_1/${bd}_wrapper.bit $mcf_design.bit
file copy -force vivado/$proj.gen/sources_1/bd/$bd/hw_handoff/$bd.hwh $mcf_design.hwh
write_hw_platform -fixed -include_bit -force $mcf_design.xsa
set bif [open $mcf_design.bif w]
puts $bif "all:\n{\n  \[destination_device = pl\] $mcf_design.bit\n}"
close $bif
exec bootgen -image $mcf_design.bif -arch zynqmp -process_bitstream bin -w on
mcf_step "done: $mcf_design.bit $mcf_design.hwh $mcf_design.bit.bin $mcf_design.dtbo shell.json $mcf_design.xsa (utilization.rpt, timing.rpt)"
