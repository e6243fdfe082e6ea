"""A step's result (resurrect.contracts.StepResult): typed fields, and results that stored
histories carry with the old ``data`` keys read into them."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from resurrect.contracts import StepResult


def test_a_step_asks_for_approval_and_gives_exclusions_back_in_typed_fields() -> None:
    result = StepResult(approval_needed="drain n1 over the drain budget", dropped_exclusions=["n2"])
    again = StepResult.model_validate_json(result.model_dump_json())
    assert again.approval_needed == "drain n1 over the drain budget"
    assert again.dropped_exclusions == ["n2"]
    assert again.data == {}


def test_a_result_stored_with_the_old_data_keys_reads_into_the_fields() -> None:
    stored = (
        '{"ok": true, "requeued": true, "excluded_nodes": ["n1"],'
        ' "data": {"dropped_exclusions": ["n2"], "approval_needed": "drain n3",'
        ' "status": 200}}'
    )
    result = StepResult.model_validate_json(stored)
    assert result.dropped_exclusions == ["n2"]
    assert result.approval_needed == "drain n3"
    assert result.data == {"status": 200}  # a plugin's own keys stay


def test_a_plugin_result_without_those_keys_is_kept_as_it_is() -> None:
    result = StepResult.model_validate({"data": {"exit_code": 0}})
    assert result.approval_needed is None and result.dropped_exclusions == []
    assert result.data == {"exit_code": 0}


def test_unknown_fields_are_still_refused() -> None:
    with pytest.raises(ValidationError):
        StepResult.model_validate({"approval": "x"})
