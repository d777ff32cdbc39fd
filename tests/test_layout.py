"""The house rules of the tree (README, "Layout"): ``tests/`` mirrors the code, so a block's test
is found from its path; no two test modules share a basename; every test folder is a package
(a bench imports as ``tests.hw.nic.test_nic`` in the simulator); the folders the project was
specified with stay."""
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / "tests"


def mirror_candidates(module: Path) -> list[Path]:
    """Where the test of ``module`` (a path under the repository) lives: ``tests/<dir>/test_<name>.py``,
    or ``tests/<dir>/test_<package>_<name>.py`` where ``<name>`` alone is taken elsewhere
    (``hw/dma/engine.py`` -> ``tests/hw/dma/test_dma_engine.py``)."""
    rel = module.relative_to(ROOT)
    folder = TESTS / rel.parent
    return [folder / f"test_{rel.stem}.py", folder / f"test_{rel.parent.name}_{rel.stem}.py"]


def test_every_hw_module_has_its_test_at_the_mirror_path():
    missing = []
    for module in sorted((ROOT / "hw").rglob("*.py")):
        if module.name == "__init__.py":
            continue
        if not any(p.is_file() for p in mirror_candidates(module)):
            missing.append(f"{module.relative_to(ROOT)}: no {mirror_candidates(module)[0].relative_to(ROOT)}")
    assert not missing, "\n".join(missing)


def test_no_two_test_modules_share_a_basename():
    seen: dict[str, Path] = {}
    clashes = []
    for path in sorted(TESTS.rglob("test_*.py")):
        if path.name in seen:
            clashes.append(f"{path.relative_to(ROOT)} and {seen[path.name].relative_to(ROOT)}")
        seen[path.name] = path
    assert not clashes, "\n".join(clashes)


def test_every_test_folder_is_a_package():
    folders = {p.parent for p in TESTS.rglob("*.py")}
    missing = sorted(str(f.relative_to(ROOT)) for f in folders if not (f / "__init__.py").is_file())
    assert not missing, f"no __init__.py in {missing}"


def test_the_specified_top_level_folders_stay():
    for folder in ("spec", "hw", "sw", "sim", "boards", "tests"):
        assert (ROOT / folder).is_dir(), folder


def test_the_rules_are_not_vacuous():
    """The mirror rule resolves both spellings, and it would catch a module without a test."""
    assert mirror_candidates(ROOT / "hw/nic/reduce.py")[0] == TESTS / "hw/nic/test_reduce.py"
    assert mirror_candidates(ROOT / "hw/dma/engine.py")[1] == TESTS / "hw/dma/test_dma_engine.py"
    assert not any(p.is_file() for p in mirror_candidates(ROOT / "hw/nic/no_such_block.py"))
