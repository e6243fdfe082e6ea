"""carry_over: one record built from another that shares some of its fields by name."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from pydantic import BaseModel, ValidationError

from resurrect.carry_over import carry_over


class Heartbeat(BaseModel):
    node: str
    seq: int
    watched: bool = False


class WireBeat(BaseModel):
    cluster: str
    node: str
    seq: int
    stopping: bool = False


@dataclass
class Decision:
    node: str
    seq: int
    notes: list[str]


def test_fields_both_declare_are_carried_and_own_ones_added() -> None:
    wire = carry_over(Heartbeat(node="n1", seq=4, watched=True), WireBeat, cluster="c")
    assert wire == WireBeat(cluster="c", node="n1", seq=4, stopping=False)


def test_own_values_win_over_carried_ones() -> None:
    beat = carry_over(WireBeat(cluster="c", node="n1", seq=4), Heartbeat, seq=5, watched=True)
    assert beat == Heartbeat(node="n1", seq=5, watched=True)


def test_a_dataclass_source_is_read_by_its_fields() -> None:
    assert carry_over(Decision(node="n2", seq=1, notes=["x"]), Heartbeat) == Heartbeat(
        node="n2", seq=1
    )


def test_the_result_is_validated() -> None:
    with pytest.raises(ValidationError):
        carry_over(Heartbeat(node="n1", seq=1), WireBeat)  # no cluster


def test_a_source_without_declared_fields_is_refused() -> None:
    with pytest.raises(TypeError):
        carry_over(object(), Heartbeat, node="n", seq=1)
