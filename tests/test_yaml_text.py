"""resurrect.yaml_text reads YAML as plain data, the same data as PyYAML's Python loader."""

from __future__ import annotations

import pytest
import yaml

from resurrect.rules.engine import shipped_pack_paths
from resurrect.yaml_text import safe_load


def test_the_shipped_packs_read_the_same_as_with_the_python_safe_loader() -> None:
    for path in shipped_pack_paths():
        text = path.read_text(encoding="utf-8")
        assert safe_load(text) == yaml.safe_load(text), path


def test_a_python_object_tag_is_refused_not_built() -> None:
    with pytest.raises(yaml.YAMLError):
        safe_load("!!python/object/apply:os.system ['true']")


def test_an_empty_document_is_none_and_bad_yaml_raises_a_yaml_error() -> None:
    assert safe_load("") is None
    with pytest.raises(yaml.YAMLError):
        safe_load("a: [1, 2")
