"""Plugin authors import exactly what resurrect.sdk exports; changing it is a breaking change.

The surface (each name, what it is, where it is defined) is pinned in
tests/fixtures/public-api/resurrect.sdk.txt.
"""

from support.public_api import describe, pinned

import resurrect.sdk as sdk


def test_public_surface_is_pinned() -> None:
    assert describe(sdk) == pinned(sdk)
