"""The KR260 flow without Vivado: the pin table and clock, the Vivado wrapper, the overlay
(compiled with dtc), and build.tcl run by tclsh against a strict mock of Vivado's commands
and IPs (tests/boards/mock_vivado.tcl)."""
import os
import re
import shutil
import subprocess
import types
from pathlib import Path

import pytest

from mcf.spec.node import NodeConfig
from amaranth import Module
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from mcf.boards.kr260 import platform, vivado
from mcf.boards.kr260.platform import PART, PIN, PL_CLOCK_HZ, KR260Platform, ps_clock_divisor
from mcf.hw.axis import AXIStreamSignature

HERE = Path(__file__).parent
ROOT = HERE.parents[1]


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


# --- platform facts -------------------------------------------------------------------------------
def test_platform_part_and_pin_table():
    p = KR260Platform()
    assert (p.device, p.package, p.speed) == ("xck26", "sfvc784", "2LV-c")
    assert PART == "xck26-sfvc784-2LV-c"
    # SFP+ TX disable sits in HD bank 43, powered at 3.3 V on the KR260 carrier
    assert (PIN["sfp_tx_disable"].site, PIN["sfp_tx_disable"].iostandard) == ("Y10", "LVCMOS33")
    assert {PIN[n].site for n in ("sfp_refclk_p", "sfp_rx_p", "sfp_tx_p")} == {"Y6", "T2", "R4"}
    assert (platform.SFP_GT_CHANNEL, platform.SFP_GT_COMMON) == ("GTHE4_CHANNEL_X0Y6", "GTHE4_COMMON_X0Y1")
    for pin in platform.PINS:
        bank = re.search(r"bank (\d+)", pin.signal)
        if pin.kind == "io":
            assert bank, pin
            assert pin.iostandard == ("LVCMOS33" if int(bank[1]) in (43, 44, 45) else "LVCMOS18"), pin
        else:
            assert pin.iostandard == "", pin
    assert len({p.site for p in platform.PINS}) == len(platform.PINS)


@pytest.mark.parametrize("network", ["loopback", "sfp"])
def test_xdc_constrains_exactly_the_ports_of_a_build(network):
    text = platform.xdc(network)
    placed = dict(re.findall(r"PACKAGE_PIN (\w+).*\[get_ports (\w+)\]", text))
    assert set(placed.values()) == set(platform.PORTS[network])
    for site, port in placed.items():
        assert PIN[port].site == site
    if network == "sfp":
        assert "create_clock -period 6.400 -name sfp_refclk [get_ports sfp_refclk_p]" in text
        assert "set_property LOC GTHE4_CHANNEL_X0Y6" in text
    else:
        assert "sfp" not in text.split("\n", 3)[-1]


def test_pl_clock_is_one_the_ps_makes():
    assert PL_CLOCK_HZ == 250_000_000 and ps_clock_divisor(PL_CLOCK_HZ) == (1, 6)
    assert ps_clock_divisor(300_000_000) == (1, 5) and ps_clock_divisor(187_500_000) == (1, 8)
    for hz, msg in [(200_000_000, "nearest 187.5 MHz (n=8) or 214.286 MHz (n=7)"),
                    (375_000_000, "above the PS's 333 MHz")]:
        with pytest.raises(ValueError, match=re.escape(msg)) as e:
            ps_clock_divisor(hz)
        assert "\n" not in str(e.value)


# --- wrapper and overlay -------------------------------------------------------------------------
def test_wrapper_names_and_attributes():
    text = vivado.wrapper_verilog(FakeNode())
    assert "module mcf_node_top (" in text and "mcf_node node (" in text
    assert '"xilinx.com:interface:aximm:1.0 s_axil AWADDR"' in text
    assert "input wire [15:0] s_axil_awaddr" in text and ".s_axil__awaddr(s_axil_awaddr)" in text
    assert '"xilinx.com:interface:axis:1.0 net0_tx TDATA"' in text
    assert "ASSOCIATED_BUSIF m_axi:net0_rx:net0_tx:net1_rx:net1_tx:s_axil" in text
    assert "FREQ_HZ" not in text          # propagated from the PS: see wrapper_verilog
    assert ".rst(~aresetn)" in text and "LEVEL_HIGH" in text


def test_wrapper_elaborates_with_icarus(tmp_path):
    """The generated node + wrapper compile together (the names line up)."""
    if shutil.which("iverilog") is None:
        pytest.fail("iverilog missing: run `make setup`")
    files = vivado.write_project(FakeNode(), vivado.BuildOptions(out=tmp_path))
    r = subprocess.run(["iverilog", "-g2012", "-s", "mcf_node_top", "-o", str(tmp_path / "a.out"),
                        str(files["node"]), str(files["wrapper"])], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def _dtc():
    exe = shutil.which("dtc")
    if exe is None:
        pytest.fail("dtc missing: run `make setup` (scripts/ensure-simulators.sh installs it)")
    return exe


def test_overlay_compiles_and_carries_the_clock(tmp_path):
    files = vivado.write_project(FakeNode(), vivado.BuildOptions(out=tmp_path))
    assert files["dtbo"].read_bytes()[:4] == bytes.fromhex("d00dfeed")      # FDT magic
    back = subprocess.run([_dtc(), "-q", "-I", "dtb", "-O", "dts", str(files["dtbo"])],
                          capture_output=True, text=True, check=True).stdout
    assert f"assigned-clock-rates = <{PL_CLOCK_HZ:#x}>" in back
    assert 'firmware-name = "mcf.bit.bin"' in back
    # HP0 carries the node's 128-bit master (AFI code 0), HPM0 is 32 bits wide (code 2 << 8)
    assert "config-afi = <0x04 0x00 0x05 0x00 0x0e 0x200>" in back
    assert "reg = <0x00 0xa0000000 0x00 0x10000>" in back and "interrupts = <0x00 0x59 0x04>" in back
    assert (tmp_path / "shell.json").read_text().count("XRNR") == 1
    # one clock: the block design's request and check (params) and the overlay
    assert f"set mcf_pl_clock_hz {PL_CLOCK_HZ}" in files["params"].read_text()


def test_overlay_without_dtc_is_one_line(tmp_path, monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda name: None)
    with pytest.raises(OSError, match="dtc not found"):
        vivado.write_project(FakeNode(), vivado.BuildOptions(out=tmp_path))


# --- build.tcl against the strict mock -------------------------------------------------------
def _run_mock(out: Path, env_extra=None, edit=None):
    if shutil.which("tclsh") is None:
        pytest.fail("tclsh missing: run `make setup`")
    shutil.copy(HERE / "mock_vivado.tcl", out)
    if edit:
        build = out / "build.tcl"
        text = build.read_text()
        old, new = edit
        assert old in text, f"build.tcl no longer contains {old!r}"
        build.write_text(text.replace(old, new))
    env = {**os.environ, **(env_extra or {})}
    return subprocess.run(["tclsh", "mock_vivado.tcl"], cwd=out, capture_output=True,
                          text=True, timeout=60, env=env)


def _project(tmp_path, network="loopback", **kw):
    vivado.write_project(FakeNode(), vivado.BuildOptions(out=tmp_path, network=network, jobs=2), **kw)
    return tmp_path


def test_build_tcl_loopback(tmp_path):
    r = _run_mock(_project(tmp_path))
    assert r.returncode == 0, r.stderr
    calls = (tmp_path / "calls.log").read_text()
    assert f"create_project -force mcf_kr260 ./vivado -part {PART}" in calls
    assert ("som240_1_connector xilinx.com:kr260_carrier:som240_1_connector:1.1 "
            "som240_2_connector xilinx.com:kr260_carrier:som240_2_connector:1.1") in calls
    assert "create_bd_cell -type module -reference mcf_node_top node" in calls
    assert "CONFIG.PSU__CRL_APB__PL0_REF_CTRL__FREQMHZ 250" in calls
    assert "connect_bd_intf_net intf:ctl_ic/M00_AXI intf:node/s_axil" in calls
    assert "connect_bd_intf_net intf:node/m_axi intf:mem_ic0/S00_AXI" in calls
    for p in ("net0", "net1"):
        assert f"connect_bd_intf_net intf:node/{p}_tx intf:node/{p}_rx" in calls
    assert "connect_bd_net pin:node/irq pin:ps/pl_ps_irq0" in calls
    assert "assign_bd_address -offset 0xa0000000 -range 0x10000" in calls
    assert "exec bootgen -image mcf.bif -arch zynqmp -process_bitstream bin -w on" in calls
    assert calls.strip().endswith("finished") and "FAIL" not in calls
    for name in ("mcf.bit", "mcf.bit.bin", "mcf.hwh", "mcf.xsa", "mcf.dtbo", "shell.json", "timing.rpt"):
        assert (tmp_path / name).is_file(), name
    assert "MCF: timing at 250 MHz: WNS 0.215 ns" in r.stdout and "MCF: done" in r.stdout


@pytest.mark.parametrize("env,msg", [({"MOCK_WNS": "-0.312"}, "WNS -0.312 ns"),
                                     ({"MOCK_WHS": "-0.004"}, "WHS -0.004 ns")])
def test_build_tcl_stops_on_failing_timing(tmp_path, env, msg):
    r = _run_mock(_project(tmp_path), env)
    assert r.returncode != 0 and "timing not met at 250 MHz" in r.stderr and msg in r.stderr
    assert (tmp_path / "timing.rpt").is_file()            # the summary is written first
    assert not (tmp_path / "mcf.bit").exists() and not (tmp_path / "vivado/mcf_kr260.runs/impl_1/mcf_wrapper.bit").exists()


@pytest.mark.parametrize("env,msg", [({"MOCK_NO_BOARD_FILES": "1"}, "KR260 board files not installed"),
                                     ({"MOCK_NO_CARRIER": "1"}, "carrier board files not installed"),
                                     ({"MOCK_PS_PLL_MHZ": "1600"}, "the PS makes pl_clk0 = 266.66")])
def test_build_tcl_refuses(tmp_path, env, msg):
    r = _run_mock(_project(tmp_path), env)
    assert r.returncode != 0 and msg in r.stderr


@pytest.mark.parametrize("edit,msg", [
    # the bug the issue found: a wrapper FREQ_HZ the PS cannot make ...
    ("FREQ_HZ 200000000", "FREQ_HZ does not match between /node/aclk(200000000) and /ps/pl_clk0(187498125)"),
    # ... and why the wrapper states none: 250 MHz is IOPLL/6 = 249.9975 MHz to Vivado
    ("FREQ_HZ 250000000", "FREQ_HZ does not match between /node/aclk(250000000) and /ps/pl_clk0(249997500)"),
    (("xilinx.com:ip:proc_sys_reset", "xilinx.com:ip:xxv_ethernet"), "IP definition not found for VLNV: xilinx.com:ip:xxv_ethernet"),
    (("CONFIG.PSU__USE__M_AXI_GP1 {0} \\\n", ""), "clk pin /ps/maxihpm1_fpd_aclk is not connected"),
    (("[get_bd_pins ctl_ic/aclk]", ""), "clk pin /ctl_ic/aclk is not connected"),
    (("[get_bd_pins node/aresetn] [get_bd_pins ctl_ic/aresetn]", "[get_bd_pins ctl_ic/aresetn]"),
     "rst pin /node/aresetn is not connected"),
    (("CONFIG.NUM_SI {1}", "CONFIG.NUM_SLAVES {1}"), "has no property CONFIG.NUM_SLAVES"),
    (("[get_bd_pins ps/pl_resetn0] [get_bd_pins rst/ext_reset_in]", "[get_bd_pins ps/pl_resetn0] [get_bd_pins node/irq]"),
     "has 2 drivers"),
    (("create_bd_port -dir O fan_en_b", "create_bd_port -dir O fan_en_b\ncreate_bd_port -dir O led2"),
     "board port led2 not connected"),
    (("[get_bd_intf_pins ctl_ic/M00_AXI] [get_bd_intf_pins node/s_axil]", "[get_bd_intf_pins node/s_axil] [get_bd_intf_pins mem_ic/S00_AXI]"),
     "no cell named mem_ic"),
    (("if {$wns < 0 || $whs < 0}", "set wns 0; set whs 0\nif {0}"), None),
])
def test_strict_mock_catches_what_vivado_would(tmp_path, edit, msg):
    """Each edit breaks build.tcl (or its inputs) the way the issue's review found or a typo would;
    the mock must refuse it.  The last one removes the timing gate's reading of the slack."""
    out = _project(tmp_path)
    if isinstance(edit, str):           # a FREQ_HZ in the wrapper (and, for 200 MHz, the PS asked for 187.5)
        wrapper = out / "mcf_node_top.v"
        wrapper.write_text(wrapper.read_text().replace("ASSOCIATED_RESET aresetn", f"ASSOCIATED_RESET aresetn, {edit}"))
        if "200" in edit:
            (out / "params.tcl").write_text((out / "params.tcl").read_text().replace(
                "set mcf_pl_clock_mhz 250", "set mcf_pl_clock_mhz 187.5"))
        edit = None
    if msg is None:     # gate removed: the bitstream must still wait for the slack to be read
        edit = ("set wns [get_property STATS.WNS $run]", "set wns 0")
        msg = "write_bitstream without reading STATS.WNS"
    r = _run_mock(out, edit=edit)
    assert r.returncode != 0 and msg in r.stderr, r.stderr[-800:]


def test_strict_mock_checks_constraints(tmp_path):
    out = _project(tmp_path)
    xdc = out / "kr260.xdc"
    good = xdc.read_text()
    xdc.write_text(good.replace("IOSTANDARD LVCMOS33", "IOSTANDARD LVCMOS18"))
    r = _run_mock(out)
    assert r.returncode != 0 and "LVCMOS18 in a 3.3 V bank" in r.stderr
    xdc.write_text(good + "set_property PACKAGE_PIN W10 [get_ports sfp_mod_abs]\n")
    r = _run_mock(out)
    assert r.returncode != 0 and "no port matched 'sfp_mod_abs'" in r.stderr
    xdc.write_text("\n".join(l for l in good.splitlines() if "led1" not in l or "false_path" in l))
    r = _run_mock(out)
    assert r.returncode != 0 and "port led1 has no PACKAGE_PIN" in r.stderr


# --- --network sfp: the plug-in point (the real provider: tests/boards/test_eth10g.py) ------------
def test_sfp_without_a_provider_is_one_line(tmp_path, monkeypatch):
    monkeypatch.setattr(vivado, "ETH_PROVIDER", "mcf.boards.kr260.no_such_provider")
    with pytest.raises(ValueError) as e:
        vivado.write_project(FakeNode(), vivado.BuildOptions(out=tmp_path, network="sfp"))
    assert "no_such_provider" in str(e.value) and "\n" not in str(e.value)


def test_sfp_provider_contract(tmp_path):
    """The flow hands the provider the node's first link, sources its eth.tcl, and refuses a
    provider that writes none; only port 0 goes to the cage, the others stay looped."""
    seen = []

    def write(out, tx, rx):
        seen.append((tx, rx))
        (Path(out) / "eth.tcl").write_text("proc mcf_eth_connect {tx rx} {}\n")
        return [Path(out) / "eth.tcl"]
    files = vivado.write_project(FakeNode(), vivado.BuildOptions(out=tmp_path / "a", network="sfp"),
                                 eth_provider=types.SimpleNamespace(write=write))
    assert seen == [("net0_tx", "net0_rx")] and files["eth0"] == tmp_path / "a" / "eth.tcl"
    assert "set mcf_net_links {{net0_tx net0_rx} {net1_tx net1_rx}}" in files["params"].read_text()
    build = files["build"].read_text()
    assert "source eth.tcl" in build and "mcf_eth_connect $tx $rx" in build
    with pytest.raises(ValueError, match="did not write eth.tcl"):
        vivado.write_project(FakeNode(), vivado.BuildOptions(out=tmp_path / "b", network="sfp"),
                             eth_provider=types.SimpleNamespace(write=lambda out, tx, rx: []))


@pytest.mark.parametrize("kw,msg", [({"network": "wifi"}, "network"), ({"jobs": 0}, "jobs"),
                                    ({"pl_clock_hz": 200_000_000}, "1500/n MHz"),
                                    ({"pl_clock_hz": 1e9}, "above the PS")])
def test_bad_options(tmp_path, kw, msg):
    with pytest.raises(ValueError, match=msg):
        vivado.write_project(FakeNode(), vivado.BuildOptions(out=tmp_path, **kw))


# --- the command --------------------------------------------------------------------------------
def test_board_build_dry_run_with_the_real_node(tmp_path):
    """`mcf board build --dry-run` on the registered node with two HP ports and two weight
    loaders: Vivado inputs that compile, and build.tcl passes the strict mock (every network
    port looped, the node's HP port p on S_AXI_HP<p>_FPD, each through its own SmartConnect).
    The node's Verilog gets the registry's checks here (Verilator -Wall lint, no dead ``always``):
    tests/hw/test_registry.py leaves this variant to this test (``LINTED_ELSEWHERE``)."""
    from mcf.sw.cli import main
    from tests.hw.test_registry import LINTED_ELSEWHERE, lint, no_dead_always
    assert ("node", {"model": "tiny", "net_ports": 2, "hp_ports": 2, "weight_ports": 2}) in LINTED_ELSEWHERE
    out = tmp_path / "kr260"
    assert main(["board", "build", "--dry-run", "--out", str(out), "-p", "model=tiny",
                 "-p", "net_ports=2", "-p", "hp_ports=2", "-p", "weight_ports=2"]) == 0
    r = subprocess.run(["iverilog", "-g2005", "-s", "mcf_node_top", "-o", str(tmp_path / "a.out"),
                        str(out / "mcf_node.v"), str(out / "mcf_node_top.v")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    no_dead_always(r.stderr)
    lint(out / "mcf_node.v", "mcf_node")
    params = (out / "params.tcl").read_text()
    assert "set mcf_net_links {{tx_0 rx_0} {tx_1 rx_1}}" in params and "set mcf_axi_masters {m_axi m_axi1}" in params
    assert ("set mcf_hp_links {{m_axi 0 S_AXI_HP0_FPD 2 saxihp0_fpd_aclk} {m_axi1 1 S_AXI_HP1_FPD 3 saxihp1_fpd_aclk}}"
            in params)
    assert "set mcf_hp_data_width 64" in params
    r = _run_mock(out)
    assert r.returncode == 0, r.stderr
    calls = (out / "calls.log").read_text()
    assert "connect_bd_intf_net intf:node/tx_1 intf:node/rx_1" in calls
    for p in (0, 1):
        m = "m_axi" if p == 0 else f"m_axi{p}"
        assert f"connect_bd_intf_net intf:node/{m} intf:mem_ic{p}/S00_AXI" in calls
        assert f"connect_bd_intf_net intf:mem_ic{p}/M00_AXI intf:ps/S_AXI_HP{p}_FPD" in calls
        assert f"CONFIG.PSU__USE__S_AXI_GP{2 + p} 1" in calls and f"CONFIG.PSU__SAXIGP{2 + p}__DATA_WIDTH 64" in calls
    assert "S_AXI_HP2_FPD" not in calls and "mem_ic2" not in calls


class FivePortNode(FakeNode):
    """A node top with five AXI4 masters (the Qwen preset's m_axi, m_axi1 .. m_axi4)."""
    def __init__(self):
        read = wiring.Signature({"araddr": Out(40), "arvalid": Out(1), "arready": In(1),
                                 "rdata": In(128), "rvalid": In(1), "rready": Out(1)})
        wiring.Component.__init__(self, {
            "s_axil": In(_lite()), "m_axi": Out(read), **{f"m_axi{p}": Out(read) for p in (1, 2, 3, 4)},
            "net0_tx": Out(AXIStreamSignature(64)), "net0_rx": In(AXIStreamSignature(64)),
            "net1_tx": Out(AXIStreamSignature(64)), "net1_rx": In(AXIStreamSignature(64)),
            "irq": Out(1)})


def test_five_ports_go_to_hp0_to_hp3_and_hpc0(tmp_path):
    """The Qwen node's five AXI4 masters: m_axi<p> on S_AXI_HP<p>_FPD, m_axi4 on S_AXI_HPC0_FPD,
    each through its own SmartConnect with the PS port's clock (mock Vivado); the overlay sets the
    five ports' AFI widths (config-afi 0/1 = HPC0, 4..11 = HP0..HP3 read / write)."""
    files = vivado.write_project(FivePortNode(), vivado.BuildOptions(out=tmp_path, jobs=2))
    assert ("set mcf_hp_links {{m_axi 0 S_AXI_HP0_FPD 2 saxihp0_fpd_aclk} {m_axi1 1 S_AXI_HP1_FPD 3 saxihp1_fpd_aclk} "
            "{m_axi2 2 S_AXI_HP2_FPD 4 saxihp2_fpd_aclk} {m_axi3 3 S_AXI_HP3_FPD 5 saxihp3_fpd_aclk} "
            "{m_axi4 4 S_AXI_HPC0_FPD 0 saxihpc0_fpd_aclk}}") in files["params"].read_text()
    back = subprocess.run([_dtc(), "-q", "-I", "dtb", "-O", "dts", str(files["dtbo"])],
                          capture_output=True, text=True, check=True).stdout
    assert ("config-afi = <0x00 0x00 0x01 0x00 0x04 0x00 0x05 0x00 0x06 0x00 0x07 0x00 0x08 0x00 0x09 0x00 "
            "0x0a 0x00 0x0b 0x00 0x0e 0x200>") in back
    r = _run_mock(tmp_path)
    assert r.returncode == 0, r.stderr
    calls = (tmp_path / "calls.log").read_text()
    for p, (intf, gp, clk) in enumerate([("S_AXI_HP0_FPD", 2, "saxihp0_fpd_aclk"), ("S_AXI_HP1_FPD", 3, "saxihp1_fpd_aclk"),
                                         ("S_AXI_HP2_FPD", 4, "saxihp2_fpd_aclk"), ("S_AXI_HP3_FPD", 5, "saxihp3_fpd_aclk"),
                                         ("S_AXI_HPC0_FPD", 0, "saxihpc0_fpd_aclk")]):
        m = "m_axi" if p == 0 else f"m_axi{p}"
        assert f"connect_bd_intf_net intf:node/{m} intf:mem_ic{p}/S00_AXI" in calls
        assert f"connect_bd_intf_net intf:mem_ic{p}/M00_AXI intf:ps/{intf}" in calls
        assert f"connect_bd_net pin:ps/pl_clk0 pin:mem_ic{p}/aclk pin:ps/{clk}" in calls
        assert f"CONFIG.PSU__USE__S_AXI_GP{gp} 1" in calls
    with pytest.raises(ValueError, match="m_axi and m_axi1..m_axi4"):
        vivado.hp_ports_of(["m_axi", "m_axi5"])


class WeightClockNode(FivePortNode):
    """The Qwen node's ports and configuration: its weight loaders on HP0..3 at their own clock
    (NodeConfig.weight_clock_hz = 300 MHz), the rest on HPC0 at the node's 250."""
    config = NodeConfig()


def test_weight_clock_on_pl_clk1(tmp_path):
    """The weight loaders' HP ports, their SmartConnects and the node's axi_clk on pl_clk1 = IOPLL / 5
    (300 MHz) with their own reset bridge, HPC0 and the rest on pl_clk0; the wrapper associates the
    four weight ports with axi_clk; the overlay sets pl_clk1; the two clocks are asynchronous groups."""
    assert NodeConfig().weight_clock_hz == 300_000_000
    files = vivado.write_project(WeightClockNode(), vivado.BuildOptions(out=tmp_path, jobs=2))
    params = files["params"].read_text()
    assert "set mcf_weight_clock_hz 300000000" in params and "set mcf_weight_hp_ports {0 1 2 3}" in params
    assert "set mcf_weight_clock_divisors {1 5}" in params
    wrapper = files["wrapper"].read_text()
    assert 'ASSOCIATED_BUSIF m_axi:m_axi1:m_axi2:m_axi3, ASSOCIATED_RESET axi_rst' in wrapper
    assert "ASSOCIATED_BUSIF m_axi4:net0_rx:net0_tx:net1_rx:net1_tx:s_axil, ASSOCIATED_RESET aresetn" in wrapper
    assert ".axi_clk(axi_clk)" in wrapper and ".axi_rst(axi_rst)" in wrapper
    assert "set_clock_groups -asynchronous -group [get_clocks clk_pl_0] -group [get_clocks clk_pl_1]" in \
        files["xdc"].read_text()
    back = subprocess.run([_dtc(), "-q", "-I", "dtb", "-O", "dts", str(files["dtbo"])],
                          capture_output=True, text=True, check=True).stdout
    assert "assigned-clock-rates = <0x11e1a300>" in back and "weight_clk" in back      # 300 000 000
    r = _run_mock(tmp_path)
    assert r.returncode == 0, r.stderr
    calls = (tmp_path / "calls.log").read_text()
    assert "CONFIG.PSU__FPGA_PL1_ENABLE 1" in calls
    assert "connect_bd_net pin:ps/pl_clk1 pin:rst_w/slowest_sync_clk pin:node/axi_clk" in calls
    assert "connect_bd_net pin:rst_w/peripheral_reset pin:node/axi_rst" in calls
    for p in range(4):
        assert f"connect_bd_net pin:ps/pl_clk1 pin:mem_ic{p}/aclk pin:ps/saxihp{p}_fpd_aclk" in calls
        assert f"connect_bd_net pin:rst_w/peripheral_aresetn pin:mem_ic{p}/aresetn" in calls
    assert "connect_bd_net pin:ps/pl_clk0 pin:mem_ic4/aclk pin:ps/saxihpc0_fpd_aclk" in calls


def test_board_build_without_vivado_is_one_line(tmp_path, capsys, monkeypatch):
    from mcf.sw.cli import main
    monkeypatch.setenv("PATH", "/nonexistent")
    assert main(["board", "build", "--out", str(tmp_path), "-p", "model=tiny"]) == 2
    err = capsys.readouterr().err.strip()
    assert "vivado not found" in err and "\n" not in err
    assert not list(tmp_path.iterdir())          # stopped before writing anything


def test_make_bitstream_without_vivado_stops_with_one_line(tmp_path):
    path = os.pathsep.join(p for p in os.environ["PATH"].split(os.pathsep)
                           if not (Path(p) / "vivado").exists())
    r = subprocess.run(["make", "-s", "--no-print-directory", "bitstream"], cwd=ROOT, capture_output=True,
                       text=True, timeout=300, env={**os.environ, "PATH": path})
    assert r.returncode != 0
    ours = [l for l in r.stderr.splitlines() if not l.startswith("make")]
    assert len(ours) == 1 and ours[0].startswith("mcf: error: vivado not found"), r.stderr


def test_docs_pin_table_and_clock_match_the_code():
    """docs/board.md repeats the pin table for readers: it must say what platform.PINS says, and
    name the PL clock the flow uses."""
    text = (ROOT / "docs" / "board.md").read_text()
    rows = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 5 and cells[0] not in ("port", "---") and not cells[0].startswith("-"):
            names, pins = cells[0].split(" / "), cells[1].split(" / ")
            if len(names) == 2:
                names[1] = names[0].rsplit("_", 1)[0] + names[1]
            for n, p in zip(names, pins):
                rows[n] = (p, "" if cells[2] == "(GT)" else cells[2])
    assert rows == {p.port: (p.site, p.iostandard) for p in platform.PINS}
    assert f"The PL clock is {PL_CLOCK_HZ / 1e6:g} MHz" in text and "200 MHz" not in text.replace(
        "PL clock 200 MHz: the PS makes only", "")
