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

# --- IP definitions ----------------------------------------------------------------------------
# pins: name {dir type enable}; type clk / rst / data; enable is an expression over [cfg NAME].
# intfs: name {mode kind enable}; config: name default (readonly: computed on read).
set ::ipdb [dict create]
dict set ::ipdb xilinx.com:ip:zynq_ultra_ps_e {
  pins {
    pl_clk0 {O clk {[cfg PSU__FPGA_PL0_ENABLE] == 1}}
    pl_resetn0 {O rst {[cfg PSU__FPGA_PL0_ENABLE] == 1}}
    maxihpm0_fpd_aclk {I clk {[cfg PSU__USE__M_AXI_GP0] == 1}}
    maxihpm1_fpd_aclk {I clk {[cfg PSU__USE__M_AXI_GP1] == 1}}
    maxihpm0_lpd_aclk {I clk {[cfg PSU__USE__M_AXI_GP2] == 1}}
    saxihp0_fpd_aclk {I clk {[cfg PSU__USE__S_AXI_GP2] == 1}}
    pl_ps_irq0 {I data {[cfg PSU__USE__IRQ0] == 1}}
  }
  intfs {
    M_AXI_HPM0_FPD {Master aximm {[cfg PSU__USE__M_AXI_GP0] == 1}}
    M_AXI_HPM1_FPD {Master aximm {[cfg PSU__USE__M_AXI_GP1] == 1}}
    M_AXI_HPM0_LPD {Master aximm {[cfg PSU__USE__M_AXI_GP2] == 1}}
    S_AXI_HP0_FPD {Slave aximm {[cfg PSU__USE__S_AXI_GP2] == 1}}
  }
  config {
    PSU__FPGA_PL0_ENABLE 0
    PSU__CRL_APB__PL0_REF_CTRL__SRCSEL IOPLL
    PSU__CRL_APB__PL0_REF_CTRL__FREQMHZ 100
    PSU__USE__M_AXI_GP0 1
    PSU__USE__M_AXI_GP1 1
    PSU__USE__M_AXI_GP2 1
    PSU__USE__S_AXI_GP2 0
    PSU__MAXIGP0__DATA_WIDTH 128
    PSU__SAXIGP2__DATA_WIDTH 128
    PSU__USE__IRQ0 0
  }
  readonly {PSU__CRL_APB__PL0_REF_CTRL__ACT_FREQMHZ}
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
    peripheral_reset {O data 1}
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
proc ps_act_mhz {cell} {
  set ::cur_cell $cell
  set pll [env_or MOCK_PS_PLL_MHZ 1499.985]
  set f [cfg PSU__CRL_APB__PL0_REF_CTRL__FREQMHZ]
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
    if {[regexp {^\s*(input|output) wire (\[\d+:0\] )?(\w+)} $line -> dir rng port]} {
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
        dict set pins $port [list $d rst 1]
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
    if {![dict exists $::config $cell $name]} { fail "cell $cell has no property $prop" }
    return [dict get $::config $cell $name]
  }
  if {[string match pin:* $obj] && $prop eq "CONFIG.FREQ_HZ"} {
    lassign [split [string range $obj 4 end] /] cell pin
    set info [pin_info $cell $pin]
    if {[lindex $info 1] ne "clk"} { fail "$obj is not a clock pin" }
    if {[llength $info] > 3 && [lindex $info 3] ne ""} { return [lindex $info 3] }
    if {![dict exists $::net_of $obj] || [lsearch [dict get $::nets [dict get $::net_of $obj]] pin:ps/pl_clk0] < 0} {
      fail "FREQ_HZ of $obj: not driven by a clock the design knows"
    }
    if {!$::validated} { fail "FREQ_HZ of $obj read before validate_bd_design propagated it" }
    return [expr {round([ps_act_mhz ps] * 1e6)}]
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
  dict set ::ports $name $dir
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
  # Clock frequencies: every net driven by pl_clk0 runs at the PS's actual rate.
  if {[dict exists $::net_of pin:ps/pl_clk0]} {
    set hz [expr {round([ps_act_mhz ps] * 1e6)}]
    foreach ep [dict get $::nets [dict get $::net_of pin:ps/pl_clk0]] {
      lassign [split [string range $ep 4 end] /] cell pin
      if {![string match pin:* $ep]} continue
      set info [pin_info $cell $pin]
      if {[llength $info] > 3 && [lindex $info 3] ne "" && abs([lindex $info 3] - $hz) > 1} {
        fail "\[BD 41-238\] Port/Pin property FREQ_HZ does not match between /$cell/${pin}([lindex $info 3]) and /ps/pl_clk0($hz)"
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
  set fh [open $::wrapper w]; puts $fh "module ${::bd}_wrapper (); endmodule"; close $fh
  return $::wrapper
}

# --- implementation ---------------------------------------------------------------------------
set ::bank_voltage {C3 1.8 F8 1.8 E8 1.8 A12 3.3 A10 3.3 J12 3.3 W10 3.3 Y10 3.3 Y9 3.3 AB11 3.3 AC11 3.3}
set ::gt_pins {Y6 Y5 T2 T1 R4 R3}
proc check_constraints {} {
  set constrained [dict create]
  foreach f $::xdcs {
    set fh [open $f]; set text [read $fh]; close $fh
    foreach line [split $text \n] {
      set line [string trim [lindex [split $line ";"] 0]]
      if {$line eq "" || [string index $line 0] eq "#"} continue
      foreach {- names} [regexp -all -inline {get_ports \{?([\w\s\[\]]+?)\}?\]} $line] {
        foreach p $names {
          if {![dict exists $::ports $p]} { fail "\[Vivado 12-584\] $f: no port matched '$p'" }
          if {[regexp {PACKAGE_PIN (\w+)} $line -> pin]} { dict set constrained $p pin $pin }
          if {[regexp {IOSTANDARD (\w+)} $line -> std]} { dict set constrained $p std $std }
        }
      }
    }
  }
  dict for {port dir} $::ports {
    if {[string match intf:* $dir]} continue
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
}
proc launch_runs {args} {
  mock launch_runs {*}$args
  if {$::top ne "${::bd}_wrapper" || $::wrapper ni $::sources} { fail "top is not the block design wrapper" }
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
