# MCF on the Kria KR260: block design (PS8 + MCF node), bitstream, .bit.bin and .hwh.
#
# Run by `mcf board build` as `vivado -mode batch -source build.tcl` in the folder that holds
# params.tcl, mcf_node.v and mcf_node_top.v (all written by `mcf board build`).
# Outputs: mcf.bit, mcf.bit.bin (fpgautil), mcf.hwh (PYNQ overlay), mcf.xsa,
# utilization.rpt, timing.rpt.  Tested without Vivado by tests/boards (a mock of its commands).

source params.tcl
set proj mcf_kr260
set bd mcf

proc mcf_step {msg} { puts "MCF: $msg" }

# --- project ------------------------------------------------------------------------------
mcf_step "creating project for $mcf_part"
create_project -force $proj ./vivado -part $mcf_part
# The KR260 board files give the PS its carrier preset (DDR4, MIO, clocks); without them the
# PS keeps the part defaults, which do not boot the KR260's DDR: install them from the
# Vivado board store (xilinx.com:kr260_som).
set som_parts [get_board_parts -quiet -latest_file_version {*kr260_som*}]
if {[llength $som_parts] == 0} {
  error "MCF: KR260 board files not installed (Vivado > Tools > Vivado Store > Boards > Kria KR260)"
}
set_property board_part [lindex $som_parts 0] [current_project]
set_property board_connections {som240_1_connector xilinx.com:kr260_carrier:som240_1_connector:1.0 som240_2_connector xilinx.com:kr260_carrier:som240_2_connector:1.0} [current_project]
add_files -norecurse [list mcf_node.v mcf_node_top.v]
if {$mcf_network eq "sfp"} { add_files -fileset constrs_1 -norecurse kr260_sfp.xdc }
update_compile_order -fileset sources_1

# --- block design -------------------------------------------------------------------------
mcf_step "block design: PS8 at pl_clk0 = $mcf_pl_clock_mhz MHz, node, interconnect"
create_bd_design $bd
set ps [create_bd_cell -type ip -vlnv xilinx.com:ip:zynq_ultra_ps_e ps]
apply_bd_automation -rule xilinx.com:bd_rule:zynq_ultra_ps_e -config {apply_board_preset "1"} $ps
set_property -dict [list \
  CONFIG.PSU__FPGA_PL0_ENABLE {1} \
  CONFIG.PSU__CRL_APB__PL0_REF_CTRL__FREQMHZ $mcf_pl_clock_mhz \
  CONFIG.PSU__USE__M_AXI_GP0 {1} \
  CONFIG.PSU__USE__M_AXI_GP1 {0} \
  CONFIG.PSU__USE__M_AXI_GP2 {0} \
  CONFIG.PSU__USE__S_AXI_GP2 {1} \
  CONFIG.PSU__SAXIGP2__DATA_WIDTH {128} \
  CONFIG.PSU__USE__IRQ0 {1}] $ps

set node [create_bd_cell -type module -reference mcf_node_top node]
set rst [create_bd_cell -type ip -vlnv xilinx.com:ip:proc_sys_reset rst]
set ctl_ic [create_bd_cell -type ip -vlnv xilinx.com:ip:smartconnect ctl_ic]
set_property -dict [list CONFIG.NUM_SI {1} CONFIG.NUM_MI {1}] $ctl_ic

set clk [get_bd_pins ps/pl_clk0]
connect_bd_net $clk [get_bd_pins rst/slowest_sync_clk] [get_bd_pins node/aclk] \
  [get_bd_pins ps/maxihpm0_fpd_aclk] [get_bd_pins ps/saxihp0_fpd_aclk] [get_bd_pins ctl_ic/aclk]
connect_bd_net [get_bd_pins ps/pl_resetn0] [get_bd_pins rst/ext_reset_in]
connect_bd_net [get_bd_pins rst/peripheral_aresetn] [get_bd_pins node/aresetn] [get_bd_pins ctl_ic/aresetn]

# PS -> node registers (AXI4-Lite through the SmartConnect's protocol conversion).
connect_bd_intf_net [get_bd_intf_pins ps/M_AXI_HPM0_FPD] [get_bd_intf_pins ctl_ic/S00_AXI]
connect_bd_intf_net [get_bd_intf_pins ctl_ic/M00_AXI] [get_bd_intf_pins node/s_axil]

# Node DMA masters -> DDR through HP0.
if {[llength $mcf_axi_masters] > 0} {
  set mem_ic [create_bd_cell -type ip -vlnv xilinx.com:ip:smartconnect mem_ic]
  set_property -dict [list CONFIG.NUM_SI [llength $mcf_axi_masters] CONFIG.NUM_MI {1}] $mem_ic
  connect_bd_net $clk [get_bd_pins mem_ic/aclk]
  connect_bd_net [get_bd_pins rst/peripheral_aresetn] [get_bd_pins mem_ic/aresetn]
  set i 0
  foreach m $mcf_axi_masters {
    connect_bd_intf_net [get_bd_intf_pins node/$m] [get_bd_intf_pins mem_ic/[format S%02d_AXI $i]]
    incr i
  }
  connect_bd_intf_net [get_bd_intf_pins mem_ic/M00_AXI] [get_bd_intf_pins ps/S_AXI_HP0_FPD]
}

if {$mcf_has_irq} { connect_bd_net [get_bd_pins node/irq] [get_bd_pins ps/pl_ps_irq0] }

# Network ports: looped back (single-board bring-up: every packet a node sends on port p
# comes back on port p) or, for port 0, the SFP+ cage through the 10G/25G Ethernet
# subsystem (free IP).  MCF packets ride as frame payload on direct-attach links; the sfp
# mode has not yet run on hardware.
set first 1
foreach link $mcf_net_links {
  lassign $link tx rx
  if {$mcf_network eq "sfp" && $first} {
    mcf_step "network port $tx/$rx on SFP+ (10GBASE-R)"
    set mac [create_bd_cell -type ip -vlnv xilinx.com:ip:xxv_ethernet mac]
    set_property -dict [list CONFIG.LINE_RATE {10} CONFIG.NUM_OF_CORES {1} \
      CONFIG.DATA_PATH_INTERFACE {AXI Stream} CONFIG.BASE_R_KR {BASE-R} \
      CONFIG.GT_REF_CLK_FREQ {156.25} CONFIG.GT_DRP_CLK {100}] $mac
    set tx_cdc [create_bd_cell -type ip -vlnv xilinx.com:ip:axis_clock_converter tx_cdc]
    set rx_cdc [create_bd_cell -type ip -vlnv xilinx.com:ip:axis_clock_converter rx_cdc]
    connect_bd_intf_net [get_bd_intf_pins node/$tx] [get_bd_intf_pins tx_cdc/S_AXIS]
    connect_bd_intf_net [get_bd_intf_pins tx_cdc/M_AXIS] [get_bd_intf_pins mac/axis_tx_0]
    connect_bd_intf_net [get_bd_intf_pins mac/axis_rx_0] [get_bd_intf_pins rx_cdc/S_AXIS]
    connect_bd_intf_net [get_bd_intf_pins rx_cdc/M_AXIS] [get_bd_intf_pins node/$rx]
    # Board-level ports, named as kr260_sfp.xdc constrains them.
    create_bd_intf_port -mode Slave -vlnv xilinx.com:interface:diff_clock_rtl:1.0 sfp_refclk
    create_bd_intf_port -mode Master -vlnv xilinx.com:interface:gt_rtl:1.0 sfp0
    connect_bd_intf_net [get_bd_intf_ports sfp_refclk] [get_bd_intf_pins mac/gt_ref_clk_0]
    connect_bd_intf_net [get_bd_intf_pins mac/gt_serial_port_0] [get_bd_intf_ports sfp0]
    set tx_on [create_bd_cell -type ip -vlnv xilinx.com:ip:xlconstant tx_on]
    set_property CONFIG.CONST_VAL {0} $tx_on
    create_bd_port -dir O sfp0_tx_disable
    connect_bd_net [get_bd_pins tx_on/dout] [get_bd_ports sfp0_tx_disable]
  } else {
    connect_bd_intf_net [get_bd_intf_pins node/$tx] [get_bd_intf_pins node/$rx]
  }
  set first 0
}

assign_bd_address
validate_bd_design
save_bd_design

# --- implementation -----------------------------------------------------------------------
set wrapper [make_wrapper -files [get_files $bd.bd] -top]
add_files -norecurse $wrapper
set_property top ${bd}_wrapper [current_fileset]
update_compile_order -fileset sources_1

mcf_step "synthesis and implementation ($mcf_jobs jobs)"
launch_runs impl_1 -to_step write_bitstream -jobs $mcf_jobs
wait_on_run impl_1
if {[get_property PROGRESS [get_runs impl_1]] ne "100%"} {
  error "MCF: implementation failed; see vivado/$proj.runs/impl_1/runme.log"
}
open_run impl_1
report_utilization -file utilization.rpt
report_timing_summary -file timing.rpt

# --- outputs ------------------------------------------------------------------------------
file copy -force vivado/$proj.runs/impl_1/${bd}_wrapper.bit mcf.bit
file copy -force vivado/$proj.gen/sources_1/bd/$bd/hw_handoff/$bd.hwh mcf.hwh
write_hw_platform -fixed -include_bit -force mcf.xsa
set bif [open mcf.bif w]
puts $bif "all:\n{\n  \[destination_device = pl\] mcf.bit\n}"
close $bif
exec bootgen -image mcf.bif -arch zynqmp -process_bitstream bin -w on
mcf_step "done: mcf.bit mcf.bit.bin mcf.hwh mcf.xsa (utilization.rpt, timing.rpt)"
