"""Every generated reply shape of every protocol's battery (tests.support.doubles.judge_battery)
is read as its judge meant it: the label meant, or nothing where nothing can be read —
never another label."""

from __future__ import annotations

import pytest

from deepledger.bench.judge_rules import LLM_RULES
from tests.support.doubles.judge_battery import BATTERIES, Shape

CASES = [
    pytest.param(rule, shape, id=f"{rule}-{index}")
    for rule, make in BATTERIES.items()
    for index, shape in enumerate(make())
]


def test_each_label_set_has_several_hundred_shapes():
    sizes = {rule: len(make()) for rule, make in BATTERIES.items()}
    assert min(sizes.values()) >= 60 and sum(sizes.values()) >= 1000, sizes
    assert all(len(make()) >= 200 for rule, make in BATTERIES.items() if rule != "gaia_text")


@pytest.mark.parametrize(("rule", "shape"), CASES)
def test_the_battery_reads_as_meant(rule: str, shape: Shape):
    protocol = LLM_RULES[rule]
    reading = protocol.read(shape.reply)
    ours = None if reading is None else protocol.label_of(reading)
    if shape.must_read or shape.intended is None:
        assert ours == shape.intended
    else:
        assert ours in (shape.intended, None)
