"""``experiments.generation3d.component_split``: the per-group bounds it compares include the product's."""

from experiments.generation3d.component_split import CAPS
from generation3d.parts import MAX_GROUP_COMPONENTS


def test_the_product_bound_is_among_the_compared_ones():
    assert MAX_GROUP_COMPONENTS in CAPS and None in CAPS
