# A strict stand-in for the Vivado Tcl commands and IPs that boards/kr260/build.tcl uses, so
# that tclsh runs build.tcl end to end without Vivado and fails where Vivado would:
#
# * IPs: the pins, interfaces and CONFIG properties of each IP the flow instantiates (from
#   public block designs of the PS8, proc_sys_reset, SmartConnect and xlconstant), with the
#   pins/interfaces a CONFIG value enables.  An unknown VLNV, pin, interface or property is an
#   error.  The module reference (mcf_node_top) is read from the wrapper Verilog's
#   X_INTERFACE_INFO attributes, as Vivado does.
# * Nets: one driver per net; interface nets join a master and a slave of the same kind.
# * validate_bd_design: every enabled clock and reset input of every cell driven, every enabled
#   interface and every board port connected, addresses assigned, and each clock net's
#   FREQ_HZ consistent: pl_clk0 = IOPLL / n (the Kria preset's IOPLL is 1499.985 MHz) is
#   propagated to pins that state no FREQ_HZ, and must equal, to the Hz, any pin that does.
# * launch_runs: every board port constrained (PACKAGE_PIN + an IOSTANDARD the bank allows),
#   no constraint on a port that does not exist; write_bitstream only after the script read
#   the routed design's setup and hold slack.  MOCK_WNS / MOCK_WHS set that slack.
#
# * create_ip (IP cores instantiated in RTL, here the transceiver wizard gtwizard_ultrascale):
#   its CONFIG properties and their values (names from public scripts and the wizard's example
#   designs), the ports of the generated core under that configuration (it may not sit in a
#   block-design module reference: UG994); every instance of the
#   core in an added Verilog file names only ports the core has and drives every input; the
#   K26's GTH sites (one quad, bank 224: X0Y4..X0Y7) with their package pins, so the channel
#   the wizard is configured for, the XDC's LOC and the PACKAGE_PINs of the GT ports must agree.
# * Clock and reset nets: a clock input is driven by a clock output or clock port (stated
#   FREQ_HZ equal on both ends), a reset input by a reset output or port of the same polarity.
# * The device top: the block design's wrapper (written with the board ports as its ports), or
#   an RTL top that instantiates it; its instances name existing ports and drive every input;
#   its ports are what the XDC must place.
# Every call is logged to calls.log (one line each).  Other knobs: MOCK_NO_BOARD_FILES,
# MOCK_NO_CARRIER (board store empty), MOCK_PS_PLL_MHZ (the preset's IOPLL, default 1499.985).
set mock_log [open calls.log w]
proc mock {args} { global mock_log; puts $mock_log [join $args " "]; flush $mock_log }
proc fail {msg} { mock FAIL $msg; error "ERROR: $msg" }
proc env_or {name default} { if {[info exists ::env($name)]} { return $::env($name) }; return $default }

set ::part {}
set ::board_part {}
set ::sources {}
set ::xdcs {}
set ::bd {}
set ::preset 0
set ::cells [dict create]      ;# name -> vlnv or module:<name>
set ::config [dict create]     ;# name -> dict of CONFIG values
set ::modules [dict create]    ;# module name -> dict {pins {...} intfs {...}}
set ::ports [dict create]      ;# board port -> direction (I/O)
set ::net_of [dict create]     ;# endpoint -> net id
set ::nets [dict create]       ;# net id -> list of endpoints
set ::next_net 0
set ::intf_peer [dict create]  ;# intf endpoint -> peer
set ::addressed 0
set ::validated 0
set ::wrapper {}
set ::top {}
set ::routed 0
set ::slack_read [dict create]
set ::bitstream 0
set ::port_info [dict create]  ;# board port -> dict {type clk/rst/data width N props {...}}
set ::ips [dict create]        ;# create_ip module name -> dict {name ... config {...} generated 0/1}

# --- IP definitions ----------------------------------------------------------------------------
# pins: name {dir type enable}; type clk / rst / data; enable is an expression over [cfg NAME].
# intfs: name {mode kind enable}; config: name default (readonly: computed on read).
set ::ipdb [dict create]
dict set ::ipdb xilinx.com:ip:zynq_ultra_ps_e {
  pins {
    pl_clk0 {O clk {[cfg PSU__FPGA_PL0_ENABLE] == 1}}
    pl_resetn0 {O rst {[cfg PSU__FPGA_PL0_ENABLE] == 1}}
    pl_clk1 {O clk {[cfg PSU__FPGA_PL1_ENABLE] == 1}}
    maxihpm0_fpd_aclk {I clk {[cfg PSU__USE__M_AXI_GP0] == 1}}
    maxihpm1_fpd_aclk {I clk {[cfg PSU__USE__M_AXI_GP1] == 1}}
    maxihpm0_lpd_aclk {I clk {[cfg PSU__USE__M_AXI_GP2] == 1}}
    saxihpc0_fpd_aclk {I clk {[cfg PSU__USE__S_AXI_GP0] == 1}}
    saxihp0_fpd_aclk {I clk {[cfg PSU__USE__S_AXI_GP2] == 1}}
    saxihp1_fpd_aclk {I clk {[cfg PSU__USE__S_AXI_GP3] == 1}}
    saxihp2_fpd_aclk {I clk {[cfg PSU__USE__S_AXI_GP4] == 1}}
    saxihp3_fpd_aclk {I clk {[cfg PSU__USE__S_AXI_GP5] == 1}}
    pl_ps_irq0 {I data {[cfg PSU__USE__IRQ0] == 1}}
  }
  intfs {
    M_AXI_HPM0_FPD {Master aximm {[cfg PSU__USE__M_AXI_GP0] == 1}}
    M_AXI_HPM1_FPD {Master aximm {[cfg PSU__USE__M_AXI_GP1] == 1}}
    M_AXI_HPM0_LPD {Master aximm {[cfg PSU__USE__M_AXI_GP2] == 1}}
    S_AXI_HPC0_FPD {Slave aximm {[cfg PSU__USE__S_AXI_GP0] == 1}}
    S_AXI_HP0_FPD {Slave aximm {[cfg PSU__USE__S_AXI_GP2] == 1}}
    S_AXI_HP1_FPD {Slave aximm {[cfg PSU__USE__S_AXI_GP3] == 1}}
    S_AXI_HP2_FPD {Slave aximm {[cfg PSU__USE__S_AXI_GP4] == 1}}
    S_AXI_HP3_FPD {Slave aximm {[cfg PSU__USE__S_AXI_GP5] == 1}}
  }
  config {
    PSU__FPGA_PL0_ENABLE 0
    PSU__CRL_APB__PL0_REF_CTRL__SRCSEL IOPLL
    PSU__CRL_APB__PL0_REF_CTRL__FREQMHZ 100
    PSU__FPGA_PL1_ENABLE 0
    PSU__CRL_APB__PL1_REF_CTRL__SRCSEL IOPLL
    PSU__CRL_APB__PL1_REF_CTRL__FREQMHZ 100
    PSU__USE__M_AXI_GP0 1
    PSU__USE__M_AXI_GP1 1
    PSU__USE__M_AXI_GP2 1
    PSU__USE__S_AXI_GP0 0
    PSU__USE__S_AXI_GP2 0
    PSU__USE__S_AXI_GP3 0
    PSU__USE__S_AXI_GP4 0
    PSU__USE__S_AXI_GP5 0
    PSU__MAXIGP0__DATA_WIDTH 128
    PSU__SAXIGP0__DATA_WIDTH 128
    PSU__SAXIGP2__DATA_WIDTH 128
    PSU__SAXIGP3__DATA_WIDTH 128
    PSU__SAXIGP4__DATA_WIDTH 128
    PSU__SAXIGP5__DATA_WIDTH 128
    PSU__USE__IRQ0 0
  }
  readonly {PSU__CRL_APB__PL0_REF_CTRL__ACT_FREQMHZ PSU__CRL_APB__PL1_REF_CTRL__ACT_FREQMHZ}
}
dict set ::ipdb xilinx.com:ip:proc_sys_reset {
  pins {
    slowest_sync_clk {I clk 1}
    ext_reset_in {I rst 1}
    aux_reset_in {I opt 1}
    mb_debug_sys_rst {I opt 1}
    dcm_locked {I opt 1}
    mb_reset {O data 1}
    bus_struct_reset {O data 1}
    peripheral_reset {O rst 1}
    interconnect_aresetn {O data 1}
    peripheral_aresetn {O rst 1}
  }
  intfs {}
  config {C_EXT_RESET_HIGH 0 C_AUX_RESET_HIGH 0 C_NUM_PERP_ARESETN 1}
  readonly {}
}
set sc_intfs {}
for {set i 0} {$i < 16} {incr i} {
  lappend sc_intfs [format S%02d_AXI $i] [list Slave aximm "\[cfg NUM_SI\] > $i"]
  lappend sc_intfs [format M%02d_AXI $i] [list Master aximm "\[cfg NUM_MI\] > $i"]
}
dict set ::ipdb xilinx.com:ip:smartconnect [list \
  pins {aclk {I clk 1} aresetn {I rst {[cfg HAS_ARESETN] == 1}}} \
  intfs $sc_intfs \
  config {NUM_SI 1 NUM_MI 1 NUM_CLKS 1 HAS_ARESETN 1} \
  readonly {}]
dict set ::ipdb xilinx.com:ip:xlconstant {
  pins {dout {O data 1}}
  intfs {}
  config {CONST_VAL 1 CONST_WIDTH 1}
  readonly {}
}

# Reset polarity of the IP pins that make or take resets (modules state theirs in the Verilog).
set ::ip_polarity {
  xilinx.com:ip:zynq_ultra_ps_e/pl_resetn0 ACTIVE_LOW
  xilinx.com:ip:proc_sys_reset/ext_reset_in ACTIVE_LOW
  xilinx.com:ip:proc_sys_reset/peripheral_aresetn ACTIVE_LOW
  xilinx.com:ip:proc_sys_reset/peripheral_reset ACTIVE_HIGH
  xilinx.com:ip:smartconnect/aresetn ACTIVE_LOW
}
proc pin_polarity {cell pin} {
  set v [dict get $::cells $cell]
  if {[string match module:* $v]} {
    set info [pin_info $cell $pin]
    return [expr {[llength $info] > 4 ? [lindex $info 4] : ""}]
  }
  if {[dict exists $::ip_polarity $v/$pin]} { return [dict get $::ip_polarity $v/$pin] }
  return ""
}

proc cfg {name} { return [dict get $::config $::cur_cell $name] }
proc cell_def {cell} {
  set v [dict get $::cells $cell]
  if {[string match module:* $v]} { return [dict get $::modules [string range $v 7 end]] }
  return [dict get $::ipdb $v]
}
proc enabled {cell cond} { set ::cur_cell $cell; return [expr $cond] }
proc pin_info {cell pin} {
  if {![dict exists $::cells $cell]} { fail "no cell named $cell" }
  set d [cell_def $cell]
  if {![dict exists $d pins $pin]} { fail "cell $cell ([dict get $::cells $cell]) has no pin $pin" }
  return [dict get $d pins $pin]
}
proc intf_info {cell intf} {
  if {![dict exists $::cells $cell]} { fail "no cell named $cell" }
  set d [cell_def $cell]
  if {![dict exists $d intfs $intf]} { fail "cell $cell ([dict get $::cells $cell]) has no interface $intf" }
  return [dict get $d intfs $intf]
}
proc ps_act_mhz {cell {pl 0}} {
  set ::cur_cell $cell
  set pll [env_or MOCK_PS_PLL_MHZ 1499.985]
  set f [cfg PSU__CRL_APB__PL${pl}_REF_CTRL__FREQMHZ]
  set n [expr {max(1, round($pll / $f))}]
  return [expr {double($pll) / $n}]
}

# --- the module reference: read the wrapper's ports and interface attributes -------------------
proc read_module {file} {
  set fh [open $file]; set text [read $fh]; close $fh
  if {![regexp {module\s+(\w+)\s*\(} $text -> name]} { fail "$file declares no module" }
  set pins [dict create]; set intfs [dict create]; set info {}; set param {}
  foreach line [split $text \n] {
    if {[regexp {X_INTERFACE_INFO = "xilinx.com:(\w+):(\w+):[\d.]+ (\w+) (\w+)"} $line -> cls kind bus sig]} {
      set info [list $cls $kind $bus $sig]; continue
    }
    if {[regexp {X_INTERFACE_PARAMETER = "([^"]*)"} $line -> p]} { set param $p; continue }
    if {[regexp {^\s*(input|output)\s+wire\s+(\[\d+:0\]\s*)?(\w+)} $line -> dir rng port]} {
      set d [expr {$dir eq "input" ? "I" : "O"}]
      if {$info ne "" && [lindex $info 0] eq "interface"} {
        lassign $info cls kind bus sig
        if {![dict exists $intfs $bus]} { dict set intfs $bus [list {} $kind 1] }
        if {$sig in {AWADDR ARADDR TDATA}} {
          set master [expr {$d eq "O"}]
          dict set intfs $bus [list [expr {$master ? "Master" : "Slave"}] $kind 1]
        }
      } elseif {$info ne "" && [lindex $info 1] eq "clock"} {
        set freq {}
        regexp {FREQ_HZ (\d+)} $param -> freq
        dict set pins $port [list $d clk 1 $freq]
      } elseif {$info ne "" && [lindex $info 1] eq "reset"} {
        set pol ACTIVE_LOW
        regexp {POLARITY (\w+)} $param -> pol
        dict set pins $port [list $d rst 1 {} $pol]
      } else {
        dict set pins $port [list $d data 1]
      }
      set info {}; set param {}
    }
  }
  dict for {bus v} $intfs { if {[lindex $v 0] eq ""} { fail "$file: interface $bus has no address/data signal to tell its mode" } }
  dict set ::modules $name [dict create pins $pins intfs $intfs config {} readonly {}]
}

# --- project ---------------------------------------------------------------------------------
proc create_project {args} {
  mock create_project {*}$args
  set i [lsearch $args -part]
  set ::part [lindex $args [expr {$i + 1}]]
  if {$::part ne "xck26-sfvc784-2LV-c"} { fail "part $::part is not the K26 (xck26-sfvc784-2LV-c)" }
}
proc current_project {} { return mcf_kr260 }
proc current_fileset {} { return sources_1 }
proc get_board_parts {args} {
  mock get_board_parts {*}$args
  if {[info exists ::env(MOCK_NO_BOARD_FILES)]} { return {} }
  return {xilinx.com:kr260_som:part0:1.1}
}
proc get_boards {args} {
  mock get_boards {*}$args
  if {[info exists ::env(MOCK_NO_BOARD_FILES)] || [info exists ::env(MOCK_NO_CARRIER)]} { return {} }
  return {xilinx.com:kr260_carrier:1.0 xilinx.com:kr260_carrier:1.1}
}
proc set_property {args} {
  mock set_property {*}$args
  if {[lindex $args 0] eq "-dict"} {
    set pairs [lindex $args 1]; set obj [lindex $args 2]
  } else {
    set pairs [lrange $args 0 1]; set obj [lindex $args 2]
  }
  if {[string match ip:* $obj]} { ip_set_property [string range $obj 3 end] $pairs; return }
  if {[string match port:* $obj]} { port_set_property [string range $obj 5 end] $pairs; return }
  if {[string match cell:* $obj]} {
    set cell [string range $obj 5 end]
    set d [cell_def $cell]
    foreach {k v} $pairs {
      if {![string match CONFIG.* $k]} { fail "set_property $k on cell $cell: only CONFIG.* properties here" }
      set name [string range $k 7 end]
      if {$name in [dict get $d readonly]} { fail "CONFIG.$name of $cell is read-only" }
      if {![dict exists $d config $name]} { fail "cell $cell ([dict get $::cells $cell]) has no property CONFIG.$name" }
      if {[string match *DATA_WIDTH $name] && $v ni {32 64 128}} { fail "CONFIG.$name = $v: 32, 64 or 128" }
      if {[string match *FREQMHZ $name] && (![string is double -strict $v] || $v <= 0)} { fail "CONFIG.$name = $v: not a frequency" }
      if {$name in {NUM_SI NUM_MI} && !($v >= 1 && $v <= 16)} { fail "CONFIG.$name = $v: 1..16" }
      dict set ::config $cell $name $v
    }
    return
  }
  foreach {k v} $pairs {
    switch -- $k {
      board_part {
        if {$v ni [get_board_parts]} { fail "board part $v is not installed" }
        set ::board_part $v
      }
      board_connections {
        foreach {conn target} $v {
          if {$conn ni {som240_1_connector som240_2_connector}} { fail "the KR260 SOM has no connector $conn" }
          set parts [split $target :]
          set ver [lindex $parts end]
          if {"xilinx.com:kr260_carrier:$ver" ni [get_boards]} { fail "board connection $target: carrier version $ver not installed" }
          if {[lindex $parts 2] ne $conn} { fail "board connection $conn -> $target: connector names differ" }
        }
      }
      top { set ::top $v }
      default { fail "set_property $k: not a property this flow should set on $obj" }
    }
  }
}
proc add_files {args} {
  mock add_files {*}$args
  set files [lindex $args end]
  foreach f $files {
    if {![file exists $f]} { fail "add_files: $f does not exist" }
    if {[lsearch $args constrs_1] >= 0} {
      if {[file extension $f] ne ".xdc"} { fail "constrs_1 takes .xdc files, not $f" }
      lappend ::xdcs $f
    } else {
      lappend ::sources $f
      if {[file extension $f] eq ".v"} {
        set fh [open $f]; set text [read $fh]; close $fh
        if {[string match *X_INTERFACE_INFO* $text]} { read_module $f }
      }
    }
  }
}
proc update_compile_order {args} { mock update_compile_order {*}$args }
proc get_files {name} {
  if {$name ne "$::bd.bd"} { fail "get_files $name: no such file in the project" }
  return $name
}

# --- block design --------------------------------------------------------------------------------
proc create_bd_design {name} { mock create_bd_design $name; set ::bd $name }
proc create_bd_cell {args} {
  mock create_bd_cell {*}$args
  if {$::bd eq ""} { fail "create_bd_cell before create_bd_design" }
  set name [lindex $args end]
  if {[dict exists $::cells $name]} { fail "cell $name exists" }
  set type [lindex $args [expr {[lsearch $args -type] + 1}]]
  if {$type eq "ip"} {
    set vlnv [lindex $args [expr {[lsearch $args -vlnv] + 1}]]
    if {![dict exists $::ipdb $vlnv]} { fail "\[BD 5-390\] IP definition not found for VLNV: $vlnv" }
    dict set ::cells $name $vlnv
    dict set ::config $name [dict get $::ipdb $vlnv config]
  } elseif {$type eq "module"} {
    set ref [lindex $args [expr {[lsearch $args -reference] + 1}]]
    if {![dict exists $::modules $ref]} { fail "module reference $ref: no such module among the added sources" }
    # UG994 (XCI inferencing): a module reference may hold IP that supports it; the transceiver
    # wizard does not ("gtwizard" is on the list of cores that cannot be inferred in one).
    set text [source_text $ref]
    dict for {mod ip} $::ips {
      if {[regexp "\\m$mod\\s+\\w+\\s*\\(" $text]} {
        fail "\[filemgmt 56-181\] Reference '$ref' contains sub-design file '$mod.xci'. This sub-design is not allowed in the reference due to following reason(s): The xilinx.com:ip:[dict get $ip name] core does not support module reference."
      }
    }
    dict set ::cells $name module:$ref
    dict set ::config $name {}
  } else { fail "create_bd_cell -type $type" }
  return cell:$name
}
proc apply_bd_automation {args} {
  mock apply_bd_automation {*}$args
  if {$::board_part eq ""} { fail "apply_board_preset without a board part" }
  set ::preset 1
}
proc get_property {prop obj} {
  if {[string match cell:* $obj]} {
    set cell [string range $obj 5 end]
    set name [string range $prop 7 end]
    if {$name eq "PSU__CRL_APB__PL0_REF_CTRL__ACT_FREQMHZ"} { return [ps_act_mhz $cell] }
    if {$name eq "PSU__CRL_APB__PL1_REF_CTRL__ACT_FREQMHZ"} { return [ps_act_mhz $cell 1] }
    if {![dict exists $::config $cell $name]} { fail "cell $cell has no property $prop" }
    return [dict get $::config $cell $name]
  }
  if {[string match pin:* $obj] && $prop eq "CONFIG.FREQ_HZ"} {
    lassign [split [string range $obj 4 end] /] cell pin
    set info [pin_info $cell $pin]
    if {[lindex $info 1] ne "clk"} { fail "$obj is not a clock pin" }
    if {[llength $info] > 3 && [lindex $info 3] ne ""} { return [lindex $info 3] }
    foreach pl {0 1} {
      if {[dict exists $::net_of $obj] && [lsearch [dict get $::nets [dict get $::net_of $obj]] pin:ps/pl_clk$pl] >= 0} {
        if {!$::validated} { fail "FREQ_HZ of $obj read before validate_bd_design propagated it" }
        return [expr {round([ps_act_mhz ps $pl] * 1e6)}]
      }
    }
    fail "FREQ_HZ of $obj: not driven by a clock the design knows"
  }
  if {$obj eq "impl_1"} {
    switch -- $prop {
      PROGRESS { return [expr {$::routed ? "100%" : "0%"}] }
      STATS.WNS - STATS.TNS - STATS.WHS - STATS.THS {
        if {!$::routed} { fail "$prop of an unrouted run" }
        dict set ::slack_read $prop 1
        set wns [env_or MOCK_WNS 0.215]; set whs [env_or MOCK_WHS 0.011]
        return [dict get [dict create STATS.WNS $wns STATS.TNS [expr {min(0, $wns) * 37}] \
                          STATS.WHS $whs STATS.THS [expr {min(0, $whs) * 5}]] $prop]
      }
    }
  }
  fail "get_property $prop $obj: not modelled"
}
proc get_bd_pins {name} {
  lassign [split $name /] cell pin
  set info [pin_info $cell $pin]
  return pin:$name
}
proc get_bd_intf_pins {name} {
  lassign [split $name /] cell intf
  intf_info $cell $intf
  return intf:$name
}
proc get_bd_ports {name} {
  if {![dict exists $::ports $name]} { fail "no board port $name" }
  return port:$name
}
proc create_bd_port {args} {
  mock create_bd_port {*}$args
  set name [lindex $args end]
  set dir [lindex $args [expr {[lsearch $args -dir] + 1}]]
  if {$dir ni {I O IO}} { fail "create_bd_port -dir $dir" }
  if {[dict exists $::ports $name]} { fail "port $name exists" }
  set type data; set width 1
  if {[lsearch $args -type] >= 0} {
    set type [lindex $args [expr {[lsearch $args -type] + 1}]]
    if {$type ni {clk rst data intr ce undef}} { fail "create_bd_port -type $type" }
  }
  if {[lsearch $args -from] >= 0} {
    set width [expr {[lindex $args [expr {[lsearch $args -from] + 1}]] - [lindex $args [expr {[lsearch $args -to] + 1}]] + 1}]
  }
  dict set ::ports $name $dir
  dict set ::port_info $name [dict create type $type width $width props [dict create]]
}
# Properties a board port of each type takes (as the block design's clock and reset checks read them).
set ::port_props {clk {FREQ_HZ ASSOCIATED_RESET ASSOCIATED_BUSIF PHASE} rst {POLARITY}}
proc port_set_property {port pairs} {
  set type [dict get $::port_info $port type]
  foreach {k v} $pairs {
    set name [string range $k 7 end]
    if {![string match CONFIG.* $k] || ![dict exists $::port_props $type] || $name ni [dict get $::port_props $type]} {
      fail "set_property $k on board port $port (type $type): no such property"
    }
    if {$name eq "FREQ_HZ" && ![string is integer -strict $v]} { fail "CONFIG.FREQ_HZ = $v of $port: a whole number of Hz" }
    if {$name eq "POLARITY" && $v ni {ACTIVE_LOW ACTIVE_HIGH}} { fail "CONFIG.POLARITY = $v of $port" }
    if {$name eq "ASSOCIATED_RESET" && (![dict exists $::port_info $v] || [dict get $::port_info $v type] ne "rst")} {
      fail "CONFIG.ASSOCIATED_RESET of $port: $v is not a reset port"
    }
    dict set ::port_info $port props $name $v
  }
}
proc port_prop {port name default} {
  if {[dict exists $::port_info $port props $name]} { return [dict get $::port_info $port props $name] }
  return $default
}
proc create_bd_intf_port {args} {
  mock create_bd_intf_port {*}$args
  set name [lindex $args end]
  set mode [lindex $args [expr {[lsearch $args -mode] + 1}]]
  dict set ::ports $name intf:$mode
}
proc get_bd_intf_ports {name} {
  if {![dict exists $::ports $name]} { fail "no board interface port $name" }
  return intfport:$name
}
proc endpoint_dir {ep} {
  # "driver" when the endpoint drives the net
  if {[string match port:* $ep]} { return [expr {[dict get $::ports [string range $ep 5 end]] eq "I" ? "drv" : "load"}] }
  lassign [split [string range $ep 4 end] /] cell pin
  set info [pin_info $cell $pin]
  if {![enabled $cell [lindex $info 2]]} { fail "pin $cell/$pin is disabled by the cell's configuration" }
  return [expr {[lindex $info 0] eq "O" ? "drv" : "load"}]
}
proc connect_bd_net {args} {
  mock connect_bd_net {*}$args
  set ids {}
  foreach ep $args {
    if {![string match pin:* $ep] && ![string match port:* $ep]} { fail "connect_bd_net $ep: not a pin or port" }
    endpoint_dir $ep
    if {[dict exists $::net_of $ep]} { lappend ids [dict get $::net_of $ep] }
  }
  set members $args
  foreach id [lsort -unique $ids] { lappend members {*}[dict get $::nets $id]; dict unset ::nets $id }
  set members [lsort -unique $members]
  set drivers {}
  foreach ep $members { if {[endpoint_dir $ep] eq "drv"} { lappend drivers $ep } }
  if {[llength $drivers] != 1} { fail "net {$members} has [llength $drivers] drivers ($drivers)" }
  set id [incr ::next_net]
  dict set ::nets $id $members
  foreach ep $members { dict set ::net_of $ep $id }
}
proc connect_bd_intf_net {a b} {
  mock connect_bd_intf_net $a $b
  set ends {}
  foreach ep [list $a $b] {
    if {[dict exists $::intf_peer $ep]} { fail "interface $ep is already connected" }
    if {[string match intf:* $ep]} {
      lassign [split [string range $ep 5 end] /] cell intf
      lassign [intf_info $cell $intf] mode kind cond
      if {![enabled $cell $cond]} { fail "interface $cell/$intf is disabled by the cell's configuration" }
      lappend ends [list $mode $kind]
    } elseif {[string match intfport:* $ep]} {
      # a board interface port connects to a pin of the same mode
      lappend ends [list [expr {[dict get $::ports [string range $ep 9 end]] eq "intf:Master" ? "Slave" : "Master"}] any]
    } else { fail "connect_bd_intf_net $ep: not an interface" }
  }
  lassign $ends e1 e2
  if {[lindex $e1 0] eq [lindex $e2 0]} { fail "connect_bd_intf_net $a $b: two [lindex $e1 0] interfaces" }
  if {"any" ni [list [lindex $e1 1] [lindex $e2 1]] && [lindex $e1 1] ne [lindex $e2 1]} {
    fail "connect_bd_intf_net $a $b: [lindex $e1 1] to [lindex $e2 1]"
  }
  dict set ::intf_peer $a $b
  dict set ::intf_peer $b $a
}
proc get_bd_addr_spaces {name} {
  if {$name ne "ps/Data" || ![dict exists $::cells ps]} { fail "no address space $name" }
  return space:$name
}
proc get_bd_addr_segs {name} {
  lassign [split $name /] cell intf seg
  lassign [intf_info $cell $intf] mode kind
  if {$mode ne "Slave" || $kind ne "aximm" || $seg ne "reg0"} { fail "no address segment $name" }
  return seg:$name
}
proc assign_bd_address {args} {
  mock assign_bd_address {*}$args
  set i [lsearch $args -offset]
  if {$i >= 0} {
    set off [lindex $args [expr {$i + 1}]]
    set range [lindex $args [expr {[lsearch $args -range] + 1}]]
    if {$off % $range} { fail "address $off is not aligned to its range $range" }
    if {$off < 0xA0000000 || $off + $range > 0xB0000000} { fail "address $off+$range outside M_AXI_HPM0_FPD (0xA0000000..0xAFFFFFFF)" }
  }
  set ::addressed 1
}
proc validate_bd_design {} {
  mock validate_bd_design
  if {!$::preset} { fail "the PS has no board preset (apply_bd_automation)" }
  if {!$::addressed} { fail "\[BD 41-1356\] slave segments are not assigned (assign_bd_address)" }
  dict for {cell vlnv} $::cells {
    set d [cell_def $cell]
    dict for {pin info} [dict get $d pins] {
      lassign $info dir type cond
      if {![enabled $cell $cond] || $dir ne "I" || $type ni {clk rst}} continue
      if {![dict exists $::net_of pin:$cell/$pin]} {
        fail "\[BD 41-758\] $type pin /$cell/$pin is not connected"
      }
    }
    dict for {intf info} [dict get $d intfs] {
      if {[enabled $cell [lindex $info 2]] && ![dict exists $::intf_peer intf:$cell/$intf]} {
        fail "interface /$cell/$intf is enabled but not connected"
      }
    }
  }
  dict for {port dir} $::ports {
    if {[string match intf:* $dir]} {
      if {![dict exists $::intf_peer intfport:$port]} { fail "board interface port $port not connected" }
    } elseif {![dict exists $::net_of port:$port]} { fail "board port $port not connected" }
  }
  # Clock and reset nets: a clock input hangs on a clock output (FREQ_HZ equal where both state
  # one), a reset input on a reset output of the same polarity.
  dict for {id members} $::nets {
    set drv {}
    foreach ep $members { if {[endpoint_dir $ep] eq "drv"} { set drv $ep } }
    # the driver as {name dir type enable freq polarity}: a cell pin, or an input board port
    if {[string match pin:* $drv]} {
      lassign [split [string range $drv 4 end] /] dcell dpin
      set dinfo [pin_info $dcell $dpin]
      set dpol [pin_polarity $dcell $dpin]
    } else {
      set dcell port; set dpin [string range $drv 5 end]
      set dinfo [list I [dict get $::port_info $dpin type] 1 [port_prop $dpin FREQ_HZ ""]]
      set dpol [port_prop $dpin POLARITY ACTIVE_LOW]
    }
    foreach ep $members {
      if {$ep eq $drv} continue
      if {[string match port:* $ep]} {
        # an output board port of type clk / rst must be driven by one
        set pname [string range $ep 5 end]
        set ptype [dict get $::port_info $pname type]
        if {$ptype in {clk rst} && [lindex $dinfo 1] ne $ptype} {
          fail "board port $pname (type $ptype) is driven by /$dcell/$dpin, which is not a [expr {$ptype eq "clk" ? "clock" : "reset"}]"
        }
        if {$ptype eq "rst" && $dpol ne [port_prop $pname POLARITY ACTIVE_LOW]} {
          fail "board port $pname ([port_prop $pname POLARITY ACTIVE_LOW]) is driven by /$dcell/$dpin ($dpol): polarity differs"
        }
        continue
      }
      lassign [split [string range $ep 4 end] /] cell pin
      set info [pin_info $cell $pin]
      set type [lindex $info 1]
      if {$type eq "clk" && [lindex $dinfo 1] ne "clk"} {
        fail "\[BD 41-759\] clock pin /$cell/$pin is driven by /$dcell/$dpin, which is not a clock"
      }
      if {$type eq "clk" && [llength $info] > 3 && [llength $dinfo] > 3 && [lindex $info 3] ne "" && [lindex $dinfo 3] ne ""
          && abs([lindex $info 3] - [lindex $dinfo 3]) > 1} {
        fail "\[BD 41-238\] Port/Pin property FREQ_HZ does not match between /$cell/${pin}([lindex $info 3]) and /$dcell/${dpin}([lindex $dinfo 3])"
      }
      if {$type eq "rst"} {
        if {[lindex $dinfo 1] ne "rst"} { fail "reset pin /$cell/$pin is driven by /$dcell/$dpin, which is not a reset" }
        set a [pin_polarity $cell $pin]; set b $dpol
        if {$a ne "" && $b ne "" && $a ne $b} { fail "reset pin /$cell/$pin ($a) is driven by /$dcell/$dpin ($b): polarity differs" }
      }
    }
  }
  # Clock frequencies: every net driven by pl_clk0 (pl_clk1) runs at the PS's actual rate.
  foreach pl {0 1} {
    if {![dict exists $::net_of pin:ps/pl_clk$pl]} continue
    set hz [expr {round([ps_act_mhz ps $pl] * 1e6)}]
    foreach ep [dict get $::nets [dict get $::net_of pin:ps/pl_clk$pl]] {
      lassign [split [string range $ep 4 end] /] cell pin
      if {![string match pin:* $ep]} continue
      set info [pin_info $cell $pin]
      if {[llength $info] > 3 && [lindex $info 3] ne "" && abs([lindex $info 3] - $hz) > 1} {
        fail "\[BD 41-238\] Port/Pin property FREQ_HZ does not match between /$cell/${pin}([lindex $info 3]) and /ps/pl_clk${pl}($hz)"
      }
    }
  }
  set ::validated 1
}
proc save_bd_design {} { mock save_bd_design; if {!$::validated} { fail "saving an unvalidated design" } }
proc make_wrapper {args} {
  mock make_wrapper {*}$args
  if {!$::validated} { fail "make_wrapper before validate_bd_design" }
  set ::wrapper ${::bd}_wrapper.v
  # the wrapper's ports are the block design's board ports, as Vivado's make_wrapper writes them
  set decls {}
  dict for {port dir} $::ports {
    if {[string match intf:* $dir]} continue
    set w [dict get $::port_info $port width]
    lappend decls "  [expr {$dir eq "I" ? "input" : "output"}] wire [expr {$w > 1 ? "\[[expr {$w - 1}]:0\] " : ""}]$port"
  }
  set fh [open $::wrapper w]; puts $fh "module ${::bd}_wrapper (\n[join $decls ",\n"]\n);\nendmodule"; close $fh
  return $::wrapper
}

# --- IP cores created with create_ip and instantiated in RTL -----------------------------------
# The K26's GTH channels (one quad, bank 224 = GTHE4_COMMON_X0Y1) and their package pins
# {RXP RXN TXP TXN}, from the part's package mapping; MGTREFCLK0 of the quad is Y6/Y5.
set ::k26_gth {X0Y4 {Y2 Y1 W4 W3} X0Y5 {V2 V1 U4 U3} X0Y6 {T2 T1 R4 R3} X0Y7 {P2 P1 N4 N3}}
set ::k26_gth_refclk {clk0 {Y6 Y5}}
# gtwizard_ultrascale: CONFIG property -> check (an enumeration, a number range, or a rule below).
set ::gtwiz_props {
  PRESET {enum {GTH-10GBASE-R GTH-10GBASE-KR GTH-Gigabit_Ethernet GTH-Aurora_8B10B GTH-Aurora_64B66B}}
  GT_TYPE {enum GTH}
  CHANNEL_ENABLE {sites}
  TX_MASTER_CHANNEL {site} RX_MASTER_CHANNEL {site}
  TX_LINE_RATE {range 0.5 16.375} RX_LINE_RATE {range 0.5 16.375}
  TX_PLL_TYPE {enum {CPLL QPLL0 QPLL1}} RX_PLL_TYPE {enum {CPLL QPLL0 QPLL1}}
  TX_REFCLK_FREQUENCY {range 60 820} RX_REFCLK_FREQUENCY {range 60 820}
  TX_REFCLK_SOURCE {refclks} RX_REFCLK_SOURCE {refclks}
  TX_DATA_ENCODING {enum {RAW 8B10B 64B66B 64B66B_ASYNC 64B67B 64B67B_ASYNC 128B130B}}
  RX_DATA_DECODING {enum {RAW 8B10B 64B66B 64B66B_ASYNC 64B67B 64B67B_ASYNC 128B130B}}
  TX_USER_DATA_WIDTH {enum {16 20 32 40 64 80 128 160}} RX_USER_DATA_WIDTH {enum {16 20 32 40 64 80 128 160}}
  TX_INT_DATA_WIDTH {enum {16 20 32 40 64 80}} RX_INT_DATA_WIDTH {enum {16 20 32 40 64 80}}
  TX_BUFFER_MODE {enum {0 1}} RX_BUFFER_MODE {enum {0 1}}
  FREERUN_FREQUENCY {range 1 500}
  LOCATE_TX_USER_CLOCKING {enum {CORE EXAMPLE_DESIGN}} LOCATE_RX_USER_CLOCKING {enum {CORE EXAMPLE_DESIGN}}
  LOCATE_RESET_CONTROLLER {enum {CORE EXAMPLE_DESIGN}} LOCATE_COMMON {enum {CORE EXAMPLE_DESIGN}}
  ENABLE_OPTIONAL_PORTS {optional}
}
set ::gtwiz_optional {rxpolarity_in txpolarity_in loopback_in qpll0lock_out rxgearboxslip_in}
set ::gtwiz_defaults {
  PRESET {} GT_TYPE GTH CHANNEL_ENABLE X0Y4 TX_MASTER_CHANNEL X0Y4 RX_MASTER_CHANNEL X0Y4
  TX_LINE_RATE 10.3125 RX_LINE_RATE 10.3125 TX_PLL_TYPE QPLL0 RX_PLL_TYPE QPLL0
  TX_REFCLK_FREQUENCY 156.25 RX_REFCLK_FREQUENCY 156.25 TX_REFCLK_SOURCE {} RX_REFCLK_SOURCE {}
  TX_DATA_ENCODING RAW RX_DATA_DECODING RAW TX_USER_DATA_WIDTH 32 RX_USER_DATA_WIDTH 32
  TX_INT_DATA_WIDTH 32 RX_INT_DATA_WIDTH 32 TX_BUFFER_MODE 1 RX_BUFFER_MODE 1 FREERUN_FREQUENCY 125
  LOCATE_TX_USER_CLOCKING CORE LOCATE_RX_USER_CLOCKING CORE LOCATE_RESET_CONTROLLER CORE
  LOCATE_COMMON CORE ENABLE_OPTIONAL_PORTS {}
}

proc create_ip {args} {
  mock create_ip {*}$args
  set name [lindex $args [expr {[lsearch $args -name] + 1}]]
  set mod [lindex $args [expr {[lsearch $args -module_name] + 1}]]
  if {$name ne "gtwizard_ultrascale"} { fail "create_ip -name $name: no IP definition this flow knows" }
  if {[lsearch $args -vendor] < 0 || [lindex $args [expr {[lsearch $args -vendor] + 1}]] ne "xilinx.com"} {
    fail "create_ip $name: vendor must be xilinx.com"
  }
  if {[dict exists $::ips $mod]} { fail "create_ip: module $mod exists" }
  dict set ::ips $mod [dict create name $name config $::gtwiz_defaults generated 0]
}
proc get_ips {name} {
  if {![dict exists $::ips $name]} { fail "get_ips $name: no such IP in the project" }
  return ip:$name
}
proc gtwiz_check {mod name v} {
  if {![dict exists $::gtwiz_props $name]} { fail "IP $mod (gtwizard_ultrascale) has no property CONFIG.$name" }
  lassign [dict get $::gtwiz_props $name] kind a b
  switch -- $kind {
    enum { if {$v ni $a} { fail "CONFIG.$name = $v of $mod: one of $a" } }
    range {
      if {![string is double -strict $v] || $v < $a || $v > $b} { fail "CONFIG.$name = $v of $mod: a number in \[$a, $b\]" }
    }
    sites {
      if {[llength $v] == 0} { fail "CONFIG.$name of $mod: no channel" }
      foreach site $v { if {![dict exists $::k26_gth $site]} { fail "CONFIG.$name = $v of $mod: $site is not a GTH channel of the K26 ([dict keys $::k26_gth])" } }
    }
    site { if {![dict exists $::k26_gth $v]} { fail "CONFIG.$name = $v of $mod: not a GTH channel of the K26" } }
    refclks {
      foreach {site clk} $v {
        if {![dict exists $::k26_gth $site] || $clk ni {clk0 clk1}} { fail "CONFIG.$name = $v of $mod: pairs of channel and clk0/clk1" }
      }
    }
    optional { foreach p $v { if {$p ni $::gtwiz_optional} { fail "CONFIG.$name of $mod: no optional port $p" } } }
  }
}
proc ip_set_property {mod pairs} {
  foreach {k v} $pairs {
    if {![string match -nocase CONFIG.* $k]} { fail "set_property $k on IP $mod: only CONFIG.* properties here" }
    set name [string toupper [string range $k 7 end]]
    gtwiz_check $mod $name $v
    dict set ::ips $mod config $name $v
    dict set ::ips $mod generated 0
  }
}
proc ipcfg {mod name} { return [dict get $::ips $mod config $name] }
proc generate_target {what ip} {
  mock generate_target $what $ip
  if {![string match ip:* $ip]} { fail "generate_target $what $ip: not an IP" }
  set mod [string range $ip 3 end]
  set c [dict get $::ips $mod config]
  set sites [dict get $c CHANNEL_ENABLE]
  foreach d {TX RX} {
    if {[dict get $c ${d}_MASTER_CHANNEL] ni $sites} { fail "$mod: ${d}_MASTER_CHANNEL [dict get $c ${d}_MASTER_CHANNEL] is not an enabled channel ($sites)" }
    set src [dict get $c ${d}_REFCLK_SOURCE]
    foreach site $sites {
      if {[lsearch -exact [dict keys $src] $site] < 0} { fail "$mod: ${d}_REFCLK_SOURCE names no reference clock for channel $site" }
    }
    set u [dict get $c ${d}_USER_DATA_WIDTH]; set i [dict get $c ${d}_INT_DATA_WIDTH]
    if {$u != $i && $u != 2 * $i} { fail "$mod: ${d}_USER_DATA_WIDTH $u with ${d}_INT_DATA_WIDTH $i (user = internal or twice it)" }
  }
  dict set ::ips $mod generated 1
}
# The ports of the generated core: name -> {dir type width}.
proc gtwiz_ports {mod} {
  set c [dict get $::ips $mod config]
  set n [llength [dict get $c CHANNEL_ENABLE]]
  set p [dict create \
    gtwiz_userdata_tx_in [list I data [expr {[dict get $c TX_USER_DATA_WIDTH] * $n}]] \
    gtwiz_userdata_rx_out [list O data [expr {[dict get $c RX_USER_DATA_WIDTH] * $n}]] \
    gthrxn_in [list I data $n] gthrxp_in [list I data $n] gthtxn_out [list O data $n] gthtxp_out [list O data $n] \
    gtpowergood_out [list O data $n] rxpmaresetdone_out [list O data $n] txpmaresetdone_out [list O data $n]]
  set plls [lsort -unique [list [dict get $c TX_PLL_TYPE] [dict get $c RX_PLL_TYPE]]]
  foreach pll $plls {
    if {$pll eq "CPLL"} { dict set p gtrefclk0_in [list I clk $n]; continue }
    set q [string index $pll end]
    if {[dict get $c LOCATE_COMMON] eq "CORE"} {
      dict set p gtrefclk${q}0_in [list I clk 1]
      dict set p qpll${q}outclk_out [list O data 1]
      dict set p qpll${q}outrefclk_out [list O data 1]
    } else {
      dict set p qpll${q}clk_in [list I clk $n]
      dict set p qpll${q}refclk_in [list I clk $n]
    }
  }
  foreach d {tx rx} D {TX RX} {
    if {[dict get $c LOCATE_${D}_USER_CLOCKING] eq "CORE"} {
      dict set p gtwiz_userclk_${d}_reset_in [list I rst 1]
      foreach o {srcclk usrclk usrclk2} { dict set p gtwiz_userclk_${d}_${o}_out [list O clk 1] }
      dict set p gtwiz_userclk_${d}_active_out [list O data 1]
    } else {
      dict set p gtwiz_userclk_${d}_active_in [list I data 1]
      dict set p ${d}usrclk_in [list I clk $n]
      dict set p ${d}usrclk2_in [list I clk $n]
      dict set p ${d}outclk_out [list O clk $n]
    }
  }
  if {[dict get $c LOCATE_RESET_CONTROLLER] eq "CORE"} {
    dict set p gtwiz_reset_clk_freerun_in [list I clk 1]
    foreach r {all tx_pll_and_datapath tx_datapath rx_pll_and_datapath rx_datapath} { dict set p gtwiz_reset_${r}_in [list I rst 1] }
    foreach o {rx_cdr_stable tx_done rx_done} { dict set p gtwiz_reset_${o}_out [list O data 1] }
  } else {
    foreach r {gttxreset gtrxreset txuserrdy rxuserrdy} { dict set p ${r}_in [list I rst $n] }
    foreach o {txresetdone rxresetdone} { dict set p ${o}_out [list O data $n] }
  }
  foreach o [dict get $c ENABLE_OPTIONAL_PORTS] {
    dict set p $o [list [expr {[string match *_in $o] ? "I" : "O"}] data $n]
  }
  return $p
}
# Every instance of a created IP core in the added Verilog: known ports only, every input driven
# (clocks by a signal, not a constant).
proc check_ip_instances {} {
  set used [dict create]
  foreach f $::sources {
    if {[file extension $f] ne ".v"} continue
    set fh [open $f]; set text [read $fh]; close $fh
    dict for {mod ip} $::ips {
      foreach {- inst body} [regexp -all -inline "\\m$mod\\s+(\\w+)\\s*\\((.*?)\\);" $text] {
        dict set used $mod 1
        if {![dict get $ip generated]} { fail "IP $mod is instantiated in $f but its output products were not generated (generate_target)" }
        set ports [gtwiz_ports $mod]
        set conn [dict create]
        foreach {- port expr} [regexp -all -inline {\.(\w+)\s*\(([^()]*)\)} $body] {
          if {![dict exists $ports $port]} { fail "\[Synth 8-448\] named port connection '$port' does not exist for instance '$inst' of module '$mod' ($f)" }
          dict set conn $port [string trim $expr]
        }
        dict for {port info} $ports {
          lassign $info dir type width
          if {$dir ne "I"} continue
          if {![dict exists $conn $port] || [dict get $conn $port] eq ""} { fail "input $port of $inst ($mod) is not driven ($f)" }
          if {$type eq "clk" && [regexp {^\d*'[bhd]} [dict get $conn $port]]} { fail "clock input $port of $inst ($mod) tied to a constant ($f)" }
        }
      }
    }
  }
  dict for {mod ip} $::ips { if {![dict exists $used $mod]} { fail "IP $mod is created but no added source instantiates it" } }
}

# --- implementation ---------------------------------------------------------------------------
set ::bank_voltage {C3 1.8 F8 1.8 E8 1.8 A12 3.3 A10 3.3 J12 3.3 W10 3.3 Y10 3.3 Y9 3.3 AB11 3.3 AC11 3.3}
proc check_constraints {} {
  set ::clocks {clk_pl_0}
  if {[dict exists $::net_of pin:ps/pl_clk1]} { lappend ::clocks clk_pl_1 }   ;# the PS's pl_clk1, when used
  set ::gt_pins [concat {*}[dict values $::k26_gth] {*}[dict values $::k26_gth_refclk]]
  set constrained [dict create]
  set locs {}
  foreach f $::xdcs {
    set fh [open $f]; set text [read $fh]; close $fh
    foreach line [split $text \n] {
      set line [string trim [lindex [split $line ";"] 0]]
      if {$line eq "" || [string index $line 0] eq "#"} continue
      if {[regexp {set_property LOC (GTHE4_CHANNEL_(\w+)) .*REF_NAME == GTHE4_CHANNEL} $line -> loc site]} {
        if {![dict exists $::k26_gth $site]} { fail "\[Vivado 12-1411\] $f: $loc is not a site of the K26" }
        lappend locs $site
      }
      if {[regexp {create_clock .*-name (\w+)} $line -> clk]} { lappend ::clocks $clk }
      foreach {- clk} [regexp -all -inline {get_clocks (?:-include_generated_clocks )?(\w+)} $line] {
        if {$clk ni $::clocks} { fail "\[Vivado 12-584\] $f: no clock matched '$clk'" }
      }
      foreach {- names} [regexp -all -inline {get_ports \{?([\w\s\[\]]+?)\}?\]} $line] {
        foreach p $names {
          if {![dict exists $::dev_ports $p]} { fail "\[Vivado 12-584\] $f: no port matched '$p'" }
          if {[regexp {PACKAGE_PIN (\w+)} $line -> pin]} { dict set constrained $p pin $pin }
          if {[regexp {IOSTANDARD (\w+)} $line -> std]} { dict set constrained $p std $std }
        }
      }
    }
  }
  dict for {port dir} $::dev_ports {
    if {![dict exists $constrained $port pin]} { fail "\[DRC UCIO-1\] port $port has no PACKAGE_PIN" }
    set pin [dict get $constrained $port pin]
    if {$pin in $::gt_pins} continue
    if {![dict exists $constrained $port std]} { fail "\[DRC NSTD-1\] port $port has no IOSTANDARD" }
    if {![dict exists $::bank_voltage $pin]} { fail "port $port on $pin: not a KR260 PL pin this flow knows" }
    set v [dict get $::bank_voltage $pin]
    set std [dict get $constrained $port std]
    if {($v == 3.3 && $std ne "LVCMOS33") || ($v == 1.8 && $std ne "LVCMOS18")} {
      fail "\[DRC BIVC-1\] port $port on $pin: $std in a $v V bank"
    }
  }
  check_gt_constraints $constrained $locs
}
proc check_gt_constraints {constrained locs} {
  # The transceiver wizard's channels, the XDC's channel LOC and the GT ports' package pins agree.
  set sites {}; set refs {}
  dict for {mod ip} $::ips {
    lappend sites {*}[dict get $ip config CHANNEL_ENABLE]
    foreach d {TX RX} { foreach {site clk} [dict get $ip config ${d}_REFCLK_SOURCE] { lappend refs $clk } }
  }
  foreach site $locs {
    if {$site ni $sites} { fail "\[Place 30-140\] LOC GTHE4_CHANNEL_$site: the transceiver wizard places its channel on [join $sites { }]" }
  }
  set allowed {}
  foreach site $sites { lappend allowed {*}[dict get $::k26_gth $site] }
  foreach clk [lsort -unique $refs] {
    if {![dict exists $::k26_gth_refclk $clk]} { fail "reference clock $clk of quad 224: not one this mock knows (clk0 = Y6/Y5)" }
    lappend allowed {*}[dict get $::k26_gth_refclk $clk]
  }
  dict for {port c} $constrained {
    if {![dict exists $c pin]} continue
    set pin [dict get $c pin]
    if {$pin in $::gt_pins && $pin ni $allowed} {
      fail "\[DRC\] port $port on transceiver pin $pin: not a pin of the wizard's channel(s) [join $sites { }] or their reference clock"
    }
  }
}
# Ports of a Verilog-2001 module: name -> {dir width}.
proc verilog_ports {text name} {
  if {![regexp "module\\s+$name\\s*\\((.*?)\\);" $text -> header]} { return {} }
  set ports [dict create]
  foreach line [split $header \n] {
    if {[regexp {^\s*(input|output)\s+wire\s+(?:\[(\d+):0\]\s*)?(\w+)} $line -> dir hi port]} {
      dict set ports $port [list [expr {$dir eq "input" ? "I" : "O"}] [expr {$hi eq "" ? 1 : $hi + 1}]]
    }
  }
  return $ports
}
proc source_text {name} {
  foreach f $::sources {
    if {[file extension $f] ne ".v"} continue
    set fh [open $f]; set text [read $fh]; close $fh
    if {[regexp "module\\s+$name\\s*\\(" $text]} { return $text }
  }
  fail "\[Synth 8-439\] module '$name' not found among the added sources"
}
# The device top: the block design's wrapper, or an RTL module that instantiates it (and other
# modules of the sources) naming only ports they have and driving all their inputs.  ::dev_ports
# are the device's ports, which the constraints must place.
proc check_top {} {
  if {$::wrapper ni $::sources} { fail "the block design wrapper is not among the sources" }
  set wtext [source_text ${::bd}_wrapper]
  if {$::top eq "${::bd}_wrapper"} { set ::dev_ports [verilog_ports $wtext ${::bd}_wrapper]; return }
  set text [source_text $::top]
  set ::dev_ports [verilog_ports $text $::top]
  if {![regexp "\\m${::bd}_wrapper\\s+\\w+\\s*\\(" $text]} { fail "top $::top does not instantiate the block design (${::bd}_wrapper)" }
  foreach {- mod inst body} [regexp -all -inline {\m(\w+)\s+(\w+)\s*\((\s*\.[^;]*?)\);} $text] {
    if {$mod in {module input output wire}} continue
    set mports [verilog_ports [source_text $mod] $mod]
    set conn [dict create]
    foreach {- port expr} [regexp -all -inline {\.(\w+)\s*\(([^()]*)\)} $body] {
      if {![dict exists $mports $port]} { fail "\[Synth 8-448\] named port connection '$port' does not exist for instance '$inst' of module '$mod' ($::top)" }
      dict set conn $port [string trim $expr]
    }
    dict for {port info} $mports {
      if {[lindex $info 0] eq "I" && (![dict exists $conn $port] || [dict get $conn $port] eq "")} {
        fail "input $port of $inst ($mod) is not driven in $::top"
      }
      if {[lindex $info 0] eq "O" && ![dict exists $conn $port]} { fail "output $port of $inst ($mod) is left open in $::top" }
    }
  }
}
proc launch_runs {args} {
  mock launch_runs {*}$args
  check_top
  if {[lsearch $args write_bitstream] >= 0} {
    if {!$::routed} { fail "write_bitstream before implementation" }
    foreach s {STATS.WNS STATS.WHS} {
      if {![dict exists $::slack_read $s]} { fail "write_bitstream without reading $s of the routed design" }
    }
    file mkdir vivado/mcf_kr260.runs/impl_1
    set fh [open vivado/mcf_kr260.runs/impl_1/${::bd}_wrapper.bit w]; puts -nonewline $fh "BIT"; close $fh
    set ::bitstream 1
  } else {
    check_constraints
    check_ip_instances
    file mkdir vivado/mcf_kr260.gen/sources_1/bd/$::bd/hw_handoff
    set fh [open vivado/mcf_kr260.gen/sources_1/bd/$::bd/hw_handoff/$::bd.hwh w]; puts $fh "<hwh/>"; close $fh
    set ::routed 1
  }
}
proc wait_on_run {args} { mock wait_on_run {*}$args }
proc get_runs {name} { if {$name ne "impl_1"} { fail "no run $name" }; return impl_1 }
proc open_run {args} { mock open_run {*}$args; if {!$::routed} { fail "open_run before implementation" } }
proc report_utilization {args} { mock report_utilization {*}$args; close [open [lindex $args end] w] }
proc report_timing_summary {args} {
  mock report_timing_summary {*}$args
  set fh [open [lindex $args end] w]; puts $fh "WNS [env_or MOCK_WNS 0.215]"; close $fh
}
proc write_hw_platform {args} {
  mock write_hw_platform {*}$args
  if {!$::bitstream} { fail "write_hw_platform -include_bit without a bitstream" }
  close [open [lindex $args end] w]
}
rename exec real_exec
proc exec {args} {
  mock exec {*}$args
  if {[lindex $args 0] ne "bootgen"} { fail "exec [lindex $args 0]: not a tool the flow may call" }
  set bif [lindex $args [expr {[lsearch $args -image] + 1}]]
  set fh [open $bif]; set text [read $fh]; close $fh
  if {![regexp {destination_device = pl\] (\S+)} $text -> bit] || ![file exists $bit]} { fail "bootgen: $bif names no bitstream" }
  file copy -force $bit $bit.bin
}

source build.tcl
mock finished
