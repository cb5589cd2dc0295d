"""What the tests that build test beds share: the skip marker for machines where network
namespaces cannot be made (no root, no iproute2), with the reason stated."""

import pytest

from real.testbed.network import unavailable_reason

NAMESPACES_UNAVAILABLE = unavailable_reason()
needs_namespaces = pytest.mark.skipif(NAMESPACES_UNAVAILABLE is not None,
                                      reason=f"cannot make namespaces: {NAMESPACES_UNAVAILABLE}")
