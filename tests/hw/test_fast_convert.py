"""``mcf.hw.fast_convert``: a conversion with the garbage collector paused writes the same text as
Amaranth's own, and leaves the collector as it found it."""
import gc

from amaranth.back import rtlil

from mcf.hw import fast_convert, registry


def _convert():
    return rtlil.convert(registry.get("header_serializer").build(), name="header_serializer")


def test_same_text_and_the_collector_back_on():
    assert gc.isenabled()
    fast = _convert()
    assert gc.isenabled()
    fast_convert.uninstall()
    try:
        slow = _convert()
    finally:
        fast_convert.install()
    assert fast == slow and "header_serializer" in fast


def test_paused_inside_and_a_caller_that_had_it_off_keeps_it_off():
    with fast_convert.collector_paused():
        assert not gc.isenabled()
        with fast_convert.collector_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()
    gc.disable()
    try:
        _convert()
        assert not gc.isenabled()
    finally:
        gc.enable()
