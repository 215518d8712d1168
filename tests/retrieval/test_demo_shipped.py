"""The retrieval tab on what ships: the shipped model and its demo gallery (no environment, no
training). A module of its own: ``test_demo``'s module fixture points the text cache at prefilled
test embeddings, which are not MiniLM's."""

import retrieval.demo as demo
from retrieval.render import GROUPS


def test_the_tab_opens_on_the_shipped_model_and_its_gallery(monkeypatch):
    """No environment, no training: the products of the shipped gallery are there when the page
    opens, and the default request on the first product brings a striped top-1 of the asked colour."""
    monkeypatch.delenv("MOE_APPS_RETRIEVAL_MODEL", raising=False)
    monkeypatch.delenv("MOE_APPS_RETRIEVAL_DATA", raising=False)
    monkeypatch.setattr(demo, "_ENGINE", None)
    monkeypatch.setattr(demo, "_CATALOG", None)
    picks, status = demo._products()
    assert len(picks) == demo.PICKS and status == "ready: 1392 products of moa3cir-fmnist"
    eng = demo.get_engine()
    first = eng.picks[0]
    items, routing = eng.query(eng.split.images[eng.split.index[first]], demo.DEFAULT_REQUEST,
                               eng.split.descriptions[first])
    assert len(items) == 10 and routing["colour"] > 0.5 and routing["pattern"] > 0.5
    from retrieval.embed import encode_single_query
    from retrieval.render import ATTRIBUTES

    q, _ = encode_single_query(eng.model, eng.split.images[eng.split.index[first]], demo.DEFAULT_REQUEST,
                               eng.split.descriptions[first])
    top = eng.split.attributes[eng.split.index[eng.index.search(q, 1)[1][0][0]]]
    assert ATTRIBUTES["colour"][top[GROUPS.index("colour")]] == "blue"
    assert ATTRIBUTES["pattern"][top[GROUPS.index("pattern")]] == "striped"


def test_the_tab_takes_a_step_from_its_first_product(monkeypatch):
    """"make it darker" on the tab's first product (a light red striped shirt) brings a darker top-1
    and routes to lightness; "a lighter one in red" a lighter red one (docs/results/retrieval/shipped.json,
    hub_steps)."""
    from retrieval.embed import encode_single_query
    from retrieval.render import ATTRIBUTES

    monkeypatch.delenv("MOE_APPS_RETRIEVAL_MODEL", raising=False)
    monkeypatch.delenv("MOE_APPS_RETRIEVAL_DATA", raising=False)
    monkeypatch.setattr(demo, "_ENGINE", None)
    eng = demo.get_engine()
    first = eng.picks[0]
    image, desc = eng.split.images[eng.split.index[first]], eng.split.descriptions[first]
    light = GROUPS.index("lightness")
    ref = eng.split.attributes[eng.split.index[first]]
    for text, step, colour in (("make it darker", -1, None), ("a lighter one in red", 1, "red")):
        _, routing = eng.query(image, text, desc)
        assert max(routing, key=routing.get) == "lightness"
        q, _ = encode_single_query(eng.model, image, text, desc)
        top = eng.split.attributes[eng.split.index[eng.index.search(q, 1)[1][0][0]]]
        assert step * (top[light] - ref[light]) > 0, text
        assert colour is None or ATTRIBUTES["colour"][top[GROUPS.index("colour")]] == colour
