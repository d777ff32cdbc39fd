import pytest


@pytest.fixture
def build_dir(tmp_path):
    """A private build directory per test (pytest-xdist workers never share one)."""
    return tmp_path / "build"
