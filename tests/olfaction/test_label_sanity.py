"""The label network trained on all of GS-LF gives well-known molecules and the demo's example
mixtures their textbook odour labels in the top 3 (a perfumer's sanity check)."""

import pytest

from common.data_dir import resolve_data_dir
from olfaction.data import load_gslf
from olfaction.demo import EXAMPLES
from olfaction.predictor import LabelNetConfig, MixturePredictor

TEXTBOOK = {
    "CC1=CCC(CC1)C(=C)C": {"citrus"},  # limonene
    "COc1cc(C=O)ccc1O": {"vanilla"},  # vanillin
    "CCCC(=O)OCC": {"fruity"},  # ethyl butyrate
    "CC(C)CCOC(C)=O": {"fruity", "banana"},  # isoamyl acetate
    "C=CCc1ccc(O)c(OC)c1": {"spicy", "clove"},  # eugenol
    "CC/C=C\\CCO": {"green"},  # cis-3-hexenol
    "CC(C)=CCC/C(C)=C/CO": {"floral", "rose"},  # geraniol
    "CC(C)=CCCC(C)(O)C=C": {"floral"},  # linalool
}
DEMO = {
    "citrus-like (limonene, citral, linalool)": {"citrus", "lemon"},
    "vanilla-like (vanillin, ethyl vanillin)": {"vanilla"},
    "fruity esters (isoamyl acetate, ethyl butyrate)": {"fruity"},
    "single: phenylethyl alcohol": {"floral", "rose"},
}


@pytest.mark.slow
def test_textbook_labels_in_top3():
    """With the shipped label features (LabelNetConfig's default)."""
    gslf = load_gslf(resolve_data_dir(None))
    model = MixturePredictor(labels=LabelNetConfig()).fit_labels(gslf)
    cases = [([s], want) for s, want in TEXTBOOK.items()]
    cases += [(EXAMPLES[name].split(";"), want) for name, want in DEMO.items()]
    misses = []
    for mixture, want in cases:
        top = [name for name, _ in model.top_labels(mixture, k=3)]
        if not want & set(top):
            misses.append(f"{mixture}: wanted one of {sorted(want)}, top 3 {top}")
    assert not misses, f"label features {model.labels_cfg.features}:\n" + "\n".join(misses)
