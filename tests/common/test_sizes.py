import pytest

from common.errors import InputError
from common.sizes import SizeTable


def test_size_table_looks_up_rows_in_order_with_one_message():
    table = SizeTable({"S": 1, "B": 2, "L": 3}, default="B")
    assert tuple(table) == ("S", "B", "L") and len(table) == 3 and table["L"] == 3
    assert table.lookup("S") == 1 and table.lookup(None) == 2 and table.default == "B"
    with pytest.raises(InputError, match=r"^unknown model size 'XL'; choose from S, B, L$"):
        table.lookup("XL")
    with pytest.raises(ValueError, match="default size 'M' is not one of S, B, L"):
        SizeTable({"S": 1, "B": 2, "L": 3}, default="M")


def test_every_app_uses_the_one_size_table_with_its_documented_default():
    from generation3d.model import MODEL_SIZES as generation3d_sizes
    from retrieval.sizes import MODEL_SIZES as retrieval_sizes
    from vision.models import MODEL_SIZES as vision_sizes

    assert [(tuple(t), t.default) for t in (retrieval_sizes, generation3d_sizes, vision_sizes)] == [
        (("XS", "S", "B"), "S"), (("S", "B", "L"), "S"), (("XS", "Ti", "S", "B", "L"), "XS")]
