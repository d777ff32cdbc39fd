# Stand-ins for the Vivado Tcl commands that boards/kr260/build.tcl uses.  Each logs its call
# (one line in calls.log) and returns a plausible value, so that tclsh can run build.tcl
# end to end without Vivado: it proves the script parses, its control flow runs for the
# given params.tcl, and it asks Vivado for what the test expects.
set mock_log [open calls.log w]
proc mock {args} { global mock_log; puts $mock_log [join $args " "]; flush $mock_log }

foreach cmd {create_project set_property add_files update_compile_order create_bd_design
             apply_bd_automation connect_bd_net connect_bd_intf_net assign_bd_address
             validate_bd_design save_bd_design launch_runs wait_on_run open_run
             report_utilization report_timing_summary write_hw_platform create_bd_intf_port
             create_bd_port} {
  proc $cmd {args} "mock $cmd {*}\$args; return {}"
}
proc current_project {} { return mcf_kr260 }
proc current_fileset {} { return sources_1 }
proc create_bd_cell {args} { mock create_bd_cell {*}$args; return [lindex $args end] }
proc get_bd_pins {name} { return "pin:$name" }
proc get_bd_intf_pins {args} { return "intf:[join $args { }]" }
proc get_bd_intf_ports {name} { return "port:$name" }
proc get_bd_ports {name} { return "port:$name" }
proc get_files {name} { return $name }
proc get_runs {name} { return $name }
proc get_property {prop obj} { return "100%" }
proc make_wrapper {args} { mock make_wrapper {*}$args; return mcf_wrapper.v }
proc get_board_parts {args} {
  if {[info exists ::env(MOCK_NO_BOARD_FILES)]} { return {} }
  return {xilinx.com:kr260_som:part0:1.1}
}
rename exec real_exec
proc exec {args} { mock exec {*}$args; return {} }

source build.tcl
mock finished
