"""The SFP+ GTH Tcl (boards/kr260/eth10g.tcl + eth10g.py) without Vivado: tclsh runs the procs
against a recorder; every node pin they wire is a port of the EthNode top (its domain clock
ports are what the port benches drive, e.g. tests/hw/eth/test_port.py), every gt pin a
port of the generated wrapper, every board port is created and connected, and the wizard is
configured for 10GBASE-R in raw mode; the wrapper compiles against stand-ins of the wizard
core and IBUFDS_GTE4 with the ports it uses."""
import re
import shutil
import subprocess

import pytest

from mcf.boards.kr260 import eth10g
from mcf.spec.node import NodeConfig

RECORDER = r"""
proc rec {args} { puts [join $args " "] }
foreach cmd {create_ip set_property generate_target add_files update_compile_order create_bd_port} {
  proc $cmd {args} "rec $cmd {*}\$args"
}
proc get_ips {name} { return ip:$name }
proc create_bd_cell {args} { rec create_bd_cell {*}$args; return [lindex $args end] }
proc get_bd_pins {name} { return pin:$name }
proc get_bd_ports {name} { return port:$name }
proc connect_bd_net {a b} { rec connect_bd_net $a $b }
source eth10g.tcl
mcf_eth10g_ip X0Y2 156.25 200
mcf_eth10g_connect node ps/pl_clk0 rst/peripheral_aresetn
"""

SMALL = NodeConfig.tiny()


def module_ports(text, name):
    header = re.search(rf"module {name} \((.*?)\);", text, re.S).group(1)
    return {line.split()[-1].strip(",") for line in header.splitlines()
            if line.strip().startswith(("input", "output"))}


def test_eth10g_tcl_wires_real_pins(tmp_path):
    if shutil.which("tclsh") is None:
        pytest.fail("tclsh not found: run `make setup`")
    from mcf.hw.eth.eth_node import EthNode
    eth10g.write(tmp_path)
    (tmp_path / "run.tcl").write_text(RECORDER)
    r = subprocess.run(["tclsh", "run.tcl"], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    calls = r.stdout.splitlines()
    node_pins = set(eth10g.node_gt_pins(EthNode(SMALL, max_frame=1518)))
    gt_pins = module_ports(eth10g.GT_WRAPPER_V, "mcf_eth10g_gt")
    used_node = set(re.findall(r"pin:node/(\w+)", r.stdout))
    used_gt = set(re.findall(r"pin:gt/(\w+)", r.stdout))
    assert used_node == node_pins, used_node ^ node_pins
    assert used_gt == gt_pins, used_gt ^ gt_pins
    created = {c.split()[-1] for c in calls if c.startswith("create_bd_port")}
    connected = set(re.findall(r"port:(\w+)", r.stdout))
    assert created == connected == set(eth10g.BOARD_PORTS)
    config = " ".join(c for c in calls if c.startswith("set_property"))
    for setting in ("CONFIG.TX_LINE_RATE 10.3125", "CONFIG.RX_LINE_RATE 10.3125", "CONFIG.TX_DATA_ENCODING RAW",
                    "CONFIG.RX_DATA_DECODING RAW", "CONFIG.TX_USER_DATA_WIDTH 64", "CONFIG.RX_USER_DATA_WIDTH 64",
                    "CONFIG.TX_REFCLK_FREQUENCY 156.25", "CONFIG.CHANNEL_ENABLE X0Y2"):
        assert setting in config, setting
    # every gt output drives something, every gt input is driven
    nets = [c.split()[1:] for c in calls if c.startswith("connect_bd_net")]
    assert {p for net in nets for p in net if p.startswith("pin:gt/")} == {f"pin:gt/{p}" for p in gt_pins}


def test_gt_wrapper_compiles(tmp_path):
    if shutil.which("iverilog") is None:
        pytest.fail("iverilog not found: run `make setup`")
    used = set(re.findall(r"\.(\w+)\(", eth10g.GT_WRAPPER_V))
    core_ports = sorted(p for p in used if p.startswith(("gtwiz_", "gtrefclk", "qpll0", "gth", "gtpower",
                                                         "rxpma", "txpma")))
    stub = ["module IBUFDS_GTE4 #(parameter REFCLK_HROW_CK_SEL = 2'b00) (input I, input IB, input CEB, "
            "output O, output ODIV2); endmodule",
            "module mcf_gth_10g (" + ", ".join(
                f"{'input' if p.endswith('_in') else 'output'} {'[63:0] ' if 'userdata' in p else ''}{p}"
                for p in core_ports) + "); endmodule"]
    (tmp_path / "stub.v").write_text("\n".join(stub) + "\n")
    (tmp_path / "gt.v").write_text(eth10g.GT_WRAPPER_V)
    r = subprocess.run(["iverilog", "-g2005", "-o", str(tmp_path / "a.out"), str(tmp_path / "gt.v"),
                        str(tmp_path / "stub.v")], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr


def test_node_without_gt_ports_is_refused():
    from mcf.hw.node import Node
    with pytest.raises(ValueError, match="EthNode"):
        eth10g.node_gt_pins(Node(SMALL))
