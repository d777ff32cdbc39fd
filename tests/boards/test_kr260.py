"""The KR260 flow without Vivado: platform facts, the Vivado wrapper, and build.tcl run by
tclsh against a mock of Vivado's commands."""
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from amaranth import Module
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from mcf.boards.kr260 import vivado
from mcf.boards.kr260.platform import PART, KR260Platform
from mcf.hw.axis import AXIStreamSignature

HERE = Path(__file__).parent


def _lite():
    names = {"awaddr": 16, "awprot": 3, "awvalid": 1, "wdata": 32, "wstrb": 4, "wvalid": 1,
             "bready": 1, "araddr": 16, "arprot": 3, "arvalid": 1, "rready": 1}
    back = {"awready": 1, "wready": 1, "bresp": 2, "bvalid": 1, "arready": 1, "rdata": 32,
            "rresp": 2, "rvalid": 1}
    return wiring.Signature({**{k: Out(w) for k, w in names.items()}, **{k: In(w) for k, w in back.items()}})


class FakeNode(wiring.Component):
    """The port shape of a node top: AXI-Lite slave, AXI master, two network ports, irq."""
    def __init__(self):
        super().__init__({
            "s_axil": In(_lite()),
            "m_axi": Out(wiring.Signature({"araddr": Out(40), "arvalid": Out(1), "arready": In(1),
                                            "rdata": In(128), "rvalid": In(1), "rready": Out(1)})),
            "net0_tx": Out(AXIStreamSignature(64)), "net0_rx": In(AXIStreamSignature(64)),
            "net1_tx": Out(AXIStreamSignature(64)), "net1_rx": In(AXIStreamSignature(64)),
            "irq": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        m.d.sync += self.irq.eq(self.s_axil.awvalid)
        m.d.comb += [self.net0_tx.tdata.eq(self.net0_rx.tdata), self.net1_tx.tvalid.eq(self.net1_rx.tvalid)]
        return m


def test_platform_part():
    p = KR260Platform()
    assert (p.device, p.package, p.speed) == ("xck26", "sfvc784", "2LV-c")
    assert PART == "xck26-sfvc784-2LV-c"


def test_wrapper_names_and_attributes():
    text = vivado.wrapper_verilog(FakeNode())
    assert "module mcf_node_top (" in text and "mcf_node node (" in text
    assert '"xilinx.com:interface:aximm:1.0 s_axil AWADDR"' in text
    assert "input wire [15:0] s_axil_awaddr" in text and ".s_axil__awaddr(s_axil_awaddr)" in text
    assert '"xilinx.com:interface:axis:1.0 net0_tx TDATA"' in text
    assert "ASSOCIATED_BUSIF m_axi:net0_rx:net0_tx:net1_rx:net1_tx:s_axil" in text
    assert ".rst(~aresetn)" in text and "LEVEL_HIGH" in text


def test_wrapper_elaborates_with_icarus(tmp_path):
    """The generated node + wrapper compile together (the names line up)."""
    if shutil.which("iverilog") is None:
        pytest.fail("iverilog missing: run `make setup`")
    files = vivado.write_project(FakeNode(), vivado.BuildOptions(out=tmp_path))
    r = subprocess.run(["iverilog", "-g2012", "-s", "mcf_node_top", "-o", str(tmp_path / "a.out"),
                        str(files["node"]), str(files["wrapper"])], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def _run_mock(tmp_path, network, env_extra=None):
    if shutil.which("tclsh") is None:
        pytest.skip("tclsh not installed")
    vivado.write_project(FakeNode(), vivado.BuildOptions(out=tmp_path, network=network, jobs=2))
    shutil.copy(HERE / "mock_vivado.tcl", tmp_path)
    # What a finished implementation leaves behind, for build.tcl to copy.
    (tmp_path / "vivado/mcf_kr260.runs/impl_1").mkdir(parents=True)
    (tmp_path / "vivado/mcf_kr260.runs/impl_1/mcf_wrapper.bit").write_bytes(b"bit")
    (tmp_path / "vivado/mcf_kr260.gen/sources_1/bd/mcf/hw_handoff").mkdir(parents=True)
    (tmp_path / "vivado/mcf_kr260.gen/sources_1/bd/mcf/hw_handoff/mcf.hwh").write_text("<hwh/>")
    env = {**os.environ, **(env_extra or {})}
    return subprocess.run(["tclsh", "mock_vivado.tcl"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=60, env=env)


def test_build_tcl_loopback(tmp_path):
    r = _run_mock(tmp_path, "loopback")
    assert r.returncode == 0, r.stderr
    calls = (tmp_path / "calls.log").read_text()
    assert f"create_project -force mcf_kr260 ./vivado -part {PART}" in calls
    assert "create_bd_cell -type module -reference mcf_node_top node" in calls
    assert "CONFIG.PSU__CRL_APB__PL0_REF_CTRL__FREQMHZ 200" in calls
    assert "connect_bd_intf_net intf:ctl_ic/M00_AXI intf:node/s_axil" in calls
    assert "connect_bd_intf_net intf:node/m_axi intf:mem_ic/S00_AXI" in calls
    for p in ("net0", "net1"):
        assert f"connect_bd_intf_net intf:node/{p}_tx intf:node/{p}_rx" in calls
    assert "connect_bd_net pin:node/irq pin:ps/pl_ps_irq0" in calls
    assert "exec bootgen -image mcf.bif -arch zynqmp -process_bitstream bin -w on" in calls
    assert calls.strip().endswith("finished")
    assert (tmp_path / "mcf.bit").read_bytes() == b"bit" and (tmp_path / "mcf.hwh").exists()
    assert "destination_device = pl" in (tmp_path / "mcf.bif").read_text()
    assert "MCF: done" in r.stdout


def test_build_tcl_sfp(tmp_path):
    r = _run_mock(tmp_path, "sfp")
    assert r.returncode == 0, r.stderr
    calls = (tmp_path / "calls.log").read_text()
    assert "xilinx.com:ip:xxv_ethernet" in calls and "add_files -fileset constrs_1 -norecurse kr260_sfp.xdc" in calls
    assert "connect_bd_intf_net intf:node/net0_tx intf:tx_cdc/S_AXIS" in calls
    assert "connect_bd_intf_net intf:node/net1_tx intf:node/net1_rx" in calls  # only port 0 on SFP


def test_build_tcl_refuses_without_board_files(tmp_path):
    r = _run_mock(tmp_path, "loopback", {"MOCK_NO_BOARD_FILES": "1"})
    assert r.returncode != 0 and "board files not installed" in r.stderr


@pytest.mark.parametrize("kw,msg", [({"network": "wifi"}, "network"), ({"jobs": 0}, "jobs"),
                                    ({"pl_clock_hz": 1e9}, "pl_clock_hz")])
def test_bad_options(tmp_path, kw, msg):
    with pytest.raises(ValueError, match=msg):
        vivado.write_project(FakeNode(), vivado.BuildOptions(out=tmp_path, **kw))


def test_board_build_dry_run_with_the_real_node(tmp_path):
    """`mcf board build --dry-run` on the registered node: Vivado inputs that compile, and
    build.tcl (mock Vivado) loops every network port and connects the DMA master to HP0."""
    from mcf.sw.cli import main
    out = tmp_path / "kr260"
    assert main(["board", "build", "--dry-run", "--out", str(out), "-p", "data_width=64",
                 "-p", "net_ports=2"]) == 0
    r = subprocess.run(["iverilog", "-g2005", "-s", "mcf_node_top", "-o", str(tmp_path / "a.out"),
                        str(out / "mcf_node.v"), str(out / "mcf_node_top.v")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    params = (out / "params.tcl").read_text()
    assert "set mcf_net_links {{tx_0 rx_0} {tx_1 rx_1}}" in params and "set mcf_axi_masters {m_axi}" in params
    if shutil.which("tclsh"):
        shutil.copy(HERE / "mock_vivado.tcl", out)
        (out / "vivado/mcf_kr260.runs/impl_1").mkdir(parents=True)
        (out / "vivado/mcf_kr260.runs/impl_1/mcf_wrapper.bit").write_bytes(b"bit")
        (out / "vivado/mcf_kr260.gen/sources_1/bd/mcf/hw_handoff").mkdir(parents=True)
        (out / "vivado/mcf_kr260.gen/sources_1/bd/mcf/hw_handoff/mcf.hwh").write_text("<hwh/>")
        r = subprocess.run(["tclsh", "mock_vivado.tcl"], cwd=out, capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        calls = (out / "calls.log").read_text()
        assert "connect_bd_intf_net intf:node/tx_1 intf:node/rx_1" in calls
        assert "connect_bd_intf_net intf:node/m_axi intf:mem_ic/S00_AXI" in calls


def test_board_build_without_vivado_is_one_line(tmp_path, capsys, monkeypatch):
    from mcf.sw.cli import main
    monkeypatch.setenv("PATH", "/nonexistent")
    assert main(["board", "build", "--out", str(tmp_path), "-p", "data_width=64"]) == 2
    err = capsys.readouterr().err.strip()
    assert "vivado not found" in err and "\n" not in err


def test_board_info_reads_a_node(tmp_path, capsys):
    """`mcf board info` through the /dev/mem backend, on a file that stands in for the node."""
    import json

    from mcf.spec import REGISTERS, ErrorCause
    from mcf.spec.regmap import ID_VALUE
    from mcf.sw.cli import main
    regs = bytearray(1 << 16)
    def put(name, value):
        off = REGISTERS[name].offset
        regs[off:off + 4] = value.to_bytes(4, "little")
    put("ID", ID_VALUE)
    put("VERSION", 1)
    put(f"ERR_{ErrorCause.BAD_ROUTE.name}", 7)
    dev = tmp_path / "mem"
    dev.write_bytes(bytes(regs))
    assert main(["board", "info", "--base", "0", "--dev", str(dev), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["version"] == 1 and info["errors"]["BAD_ROUTE"] == 7 and info["errors"]["BAD_DST"] == 0
    put("ID", 0x12345678)
    dev.write_bytes(bytes(regs))
    assert main(["board", "info", "--base", "0", "--dev", str(dev)]) == 2
    assert "no MCF node here" in capsys.readouterr().err


def test_board_load_missing_file_is_one_line(tmp_path, capsys):
    from mcf.sw.cli import main
    assert main(["board", "load", str(tmp_path / "nope.bit")]) == 2
    assert "no such bitstream" in capsys.readouterr().err
