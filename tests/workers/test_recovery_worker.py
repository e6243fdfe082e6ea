"""The recovery worker loads what recoveries read (plans, rule packs) before it serves any:
a broken one stops start-up, not a recovery midway."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from support.builders import make_config
from temporalio.client import Client

from resurrect.errors import RuleError
from resurrect.testing import FakeScheduler
from resurrect.workers.recovery_worker import build_worker

pytestmark = pytest.mark.temporal


async def test_a_broken_rule_pack_stops_start_up_naming_its_file(
    temporal_client: Client, tmp_path: Path
) -> None:
    pack = tmp_path / "site.yaml"
    pack.write_text("pack: [unclosed\n")
    config = make_config(tmp_path, rules={"extra_packs": [str(pack)]})
    with pytest.raises(RuleError, match=re.escape(str(pack))):
        build_worker(temporal_client, config, FakeScheduler.with_nodes(1))
