"""Self-reflective augmentation: a generator proposes single-attribute edits, a critic checks them.

Loop per proposal (at most ``1 + max_retries`` rounds)::

    proposal = editor.propose(reference, intended_group)
    verdict  = critic.check(reference, proposal)
    while not verdict.accepted and retries left:
        proposal = editor.refine(proposal, verdict)      # fix what the critic flagged
        verdict  = critic.check(reference, proposal)

Both sides are pluggable (``Editor`` / ``Critic`` protocols) so a local vision-language model can
replace either. The built-in ``RenderEditor`` is an *imperfect* generator: with ``drift_prob`` it
also changes an unintended attribute (as image editors do), and with ``text_error_prob`` its
modification text names a wrong value. The built-in ``AttributeCritic`` is an attribute
classifier trained here on the training images: it accepts only when the predicted attributes of
reference and edit differ exactly in the intended group and the text names the intended value
and no other attribute value. (Fabric is nearly invisible, so the critic cannot see fabric drift.)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import lightning.pytorch as L
import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from common.engine import fit as engine_fit
from common.engine import make_trainer, shuffled_loader
from common.pretrained import PretrainedMixin, register_model, register_to_config

from .captions import SYNONYMS, describe, modification_text
from .data import CIRSplit, Triplet
from .features import RowIndex
from .render import ATTRIBUTES, GROUPS, NUM_VALUES, RELATIVE_GROUPS, Attributes, render
from .synth import change_attribute
from .towers import ImageTower


@dataclass
class EditProposal:
    ref_id: str
    intended: str
    image: np.ndarray  # (32, 32, 3) uint8
    attrs: Attributes  # what the editor claims the new item is
    text: str
    description: str
    silhouette: np.ndarray
    hidden_attrs: Attributes | None = None  # what was actually rendered (simulation ground truth)
    round: int = 0


@dataclass
class Verdict:
    accepted: bool
    reasons: list[str] = field(default_factory=list)
    image_changed: list[str] = field(default_factory=list)


class Editor(Protocol):
    def propose(
        self,
        ref_attrs: Attributes,
        silhouette: np.ndarray,
        ref_id: str,
        intended: str,
        rng: np.random.Generator,
    ) -> EditProposal: ...

    def refine(
        self, proposal: EditProposal, verdict: Verdict, ref_attrs: Attributes, rng: np.random.Generator
    ) -> EditProposal: ...


class Critic(Protocol):
    def check(self, ref_image: np.ndarray, proposal: EditProposal, ref_attrs: Attributes) -> Verdict: ...


class RenderEditor:
    """Renderer-backed editor with controllable error rates (a stand-in for a generative editor)."""

    def __init__(self, drift_prob: float = 0.35, text_error_prob: float = 0.15, renderer=render):
        """``renderer(silhouette (28, 28), attrs, rng) -> (32, 32, 3) uint8`` draws the edits
        (``retrieval.data.item_renderer`` gives the one of a built benchmark)."""
        self.drift_prob, self.text_error_prob = drift_prob, text_error_prob
        self.renderer = renderer

    def _make(
        self,
        ref: Attributes,
        claimed: Attributes,
        silhouette,
        ref_id,
        intended,
        rng,
        drift: bool,
        text_error: bool,
        rnd: int,
    ) -> EditProposal:
        actual = claimed
        if drift:
            others = [
                g
                for g in ("colour", "pattern", "finish")
                if g != intended and not (g == "pattern" and intended == "scale")
            ]
            actual = change_attribute(claimed, str(rng.choice(others)), rng)
        text_tgt = change_attribute(claimed, intended, rng) if text_error else claimed
        if text_tgt.as_list()[GROUPS.index(intended)] == ref.as_list()[GROUPS.index(intended)]:
            text_tgt = claimed
        return EditProposal(
            ref_id,
            intended,
            self.renderer(silhouette, actual, rng),
            claimed,
            modification_text(ref, text_tgt, [intended], rng),
            describe(claimed, rng),
            silhouette,
            actual,
            rnd,
        )

    def propose(self, ref_attrs, silhouette, ref_id, intended, rng):
        claimed = change_attribute(ref_attrs, intended, rng)
        return self._make(
            ref_attrs,
            claimed,
            silhouette,
            ref_id,
            intended,
            rng,
            rng.random() < self.drift_prob,
            rng.random() < self.text_error_prob,
            0,
        )

    def refine(self, proposal, verdict, ref_attrs, rng):
        # Re-generate, told what was wrong: the flagged parts are redone (each may fail again).
        img_bad = any(r.startswith("image") for r in verdict.reasons)
        txt_bad = any(r.startswith("text") for r in verdict.reasons)
        drift = (rng.random() < self.drift_prob / 2) if img_bad else proposal.hidden_attrs != proposal.attrs
        text_error = (rng.random() < self.text_error_prob / 2) if txt_bad else False
        return self._make(
            ref_attrs,
            proposal.attrs,
            proposal.silhouette,
            proposal.ref_id,
            proposal.intended,
            rng,
            drift,
            text_error,
            proposal.round + 1,
        )


@register_model("attribute_classifier")
class AttributeClassifier(PretrainedMixin, nn.Module):
    """CNN attribute classifier: (b, 3, 32, 32) -> list of (b, n_values_g) logits, one per group."""

    @register_to_config
    def __init__(self, d: int = 48):
        super().__init__()
        self.d = d
        self.tower = ImageTower(d)
        self.trunk = nn.Sequential(
            nn.Flatten(), nn.Linear(64 * d, 128), nn.GELU()
        )  # keeps the layout (shape)
        self.heads = nn.ModuleList(nn.Linear(128, n) for n in NUM_VALUES)

    def forward(self, img: torch.Tensor) -> list[torch.Tensor]:
        h = self.trunk(self.tower(img))
        return [head(h) for head in self.heads]

    @torch.no_grad()
    def predict(self, images: np.ndarray) -> np.ndarray:
        """(n, 32, 32, 3) uint8 -> (n, G) predicted value indices (scale -1 when predicted solid)."""
        self.eval()
        x = torch.from_numpy(np.ascontiguousarray(images)).permute(0, 3, 1, 2).float()
        pred = torch.stack([lg.argmax(-1) for lg in self(x.to(self.heads[0].weight.device))], 1).cpu().numpy()
        pred[pred[:, GROUPS.index("pattern")] == 0, GROUPS.index("scale")] = -1
        return pred

    @classmethod
    def tiny_example(cls):
        torch.manual_seed(0)
        return cls(d=8), (torch.rand(2, 3, 32, 32, generator=torch.Generator().manual_seed(0)) * 255,)


class _CriticModule(L.LightningModule):
    """The critic's classifier on ``common.engine``: ``model(img (b, 3, 32, 32))`` -> one
    (b, n_values_g) logit tensor per group, trained with the sum over groups of cross-entropy on
    labels ``y`` (n, G) (-1 ignored), AdamW lr 3e-3, on batches of rows (b,) of ``x`` (n, 3, 32, 32)."""

    def __init__(self, model: nn.Module, x: torch.Tensor, y: torch.Tensor):
        super().__init__()
        self.model, self.x, self.y = model, x, y

    def training_step(self, rows: torch.Tensor, batch_idx: int) -> torch.Tensor:
        rows = rows.cpu()
        logits, y = self.model(self.x[rows].to(self.device)), self.y[rows].to(self.device)
        loss = sum(F.cross_entropy(lg, y[:, g], ignore_index=-1) for g, lg in enumerate(logits) if (y[:, g] >= 0).any())
        self.log("train_loss", loss.detach(), batch_size=len(rows))
        return loss

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=3e-3)


def train_attribute_classifier(
    images: np.ndarray, attrs: np.ndarray, epochs: int = 3, seed: int = 0, batch_size: int = 128,
    device: str | torch.device | None = "auto",
) -> AttributeClassifier:
    """Train the critic's classifier on (n, 32, 32, 3) uint8 images with (n, G) labels (-1
    ignored) for ``epochs`` epochs on ``device`` (a fixed budget: the critic is judged by the
    augmentation's acceptance, not a split). Returns it in eval mode."""
    torch.manual_seed(seed)
    model = AttributeClassifier()
    x = torch.from_numpy(np.ascontiguousarray(images)).permute(0, 3, 1, 2).float()
    module = _CriticModule(model, x, torch.from_numpy(attrs).long())
    trainer = make_trainer(None, max_epochs=epochs, seed=seed, progress=False, checkpoint=False, device=device)
    engine_fit(trainer, module, shuffled_loader(RowIndex(len(x)), batch_size, seed=seed), resume=False)
    model.eval()
    return model


def mentioned_values(text: str) -> dict[str, set[str]]:
    """Attribute values a text names, by keyword lexicon: {group: {value, ...}}."""
    low = f" {text.lower()} "
    found: dict[str, set[str]] = {}
    for group, table in SYNONYMS.items():
        for value, words in table.items():
            if any(f" {w} " in low or f" {w}," in low or f" {w}er " in low for w in words + [value]):
                found.setdefault(group, set()).add(value)
    return found


class AttributeCritic:
    """Accept iff the image changed exactly in the intended group and the text says exactly that.

    ``save(dir)`` / ``AttributeCritic.load(dir)``: the classifier's ``save_pretrained`` /
    ``from_pretrained`` directory (``model.safetensors`` + ``config.json``), like the retrieval models.
    """

    # visually checkable groups (fabric is nearly invisible)
    visible = ("category", "colour", "pattern", "scale", "finish")

    def __init__(self, classifier: AttributeClassifier):
        self.classifier = classifier

    def save(self, path: Path) -> Path:
        return self.classifier.save_pretrained(Path(path))

    @classmethod
    def load(cls, path: Path) -> AttributeCritic:
        return cls(AttributeClassifier.from_pretrained(Path(path)))

    def check(self, ref_image, proposal, ref_attrs) -> Verdict:
        pred = self.classifier.predict(np.stack([ref_image, proposal.image]))
        changed = [g for i, g in enumerate(GROUPS) if g in self.visible and pred[0, i] != pred[1, i]]
        reasons = []
        if proposal.intended in self.visible and proposal.intended not in changed:
            reasons.append(f"image: intended {proposal.intended} did not change")
        extra = [
            g
            for g in changed
            if g != proposal.intended and not (g == "scale" and proposal.intended == "pattern")
        ]
        if extra:
            reasons.append(f"image: unintended change in {', '.join(extra)}")
        want = ATTRIBUTES[proposal.intended][proposal.attrs.as_list()[GROUPS.index(proposal.intended)]]
        said = mentioned_values(proposal.text)
        if want not in said.get(proposal.intended, set()) and proposal.intended != "pattern":
            reasons.append(f"text: does not name {want}")
        wrong = [
            f"{g}={v}"
            for g, vs in said.items()
            for v in vs
            if not (g == proposal.intended and v == want)
            and g != "category"
            and not (g == proposal.intended and v == ATTRIBUTES[g][ref_attrs.as_list()[GROUPS.index(g)]])
        ]
        if wrong and proposal.intended != "category":
            reasons.append(f"text: names {', '.join(sorted(wrong))}")
        return Verdict(not reasons, reasons, changed)


def garment_of(item_id: str) -> int:
    """Fashion-MNIST row of a synthetic item id ``<var>_<split>_<garment>_<n>``."""
    try:
        return int(item_id.split("_")[2])
    except (IndexError, ValueError):
        raise ValueError(f"{item_id!r} is not a synthetic benchmark id") from None


@dataclass
class AugmentStats:
    proposals: int = 0
    accepted_first_try: int = 0
    accepted: int = 0
    rounds: int = 0
    accepted_clean: int = 0  # accepted edits whose render truly changed only the intended group

    def as_dict(self) -> dict:
        p = max(self.proposals, 1)
        return {
            "proposals": self.proposals,
            "acceptance_first_try": self.accepted_first_try / p,
            "acceptance_after_refine": self.accepted / p,
            "mean_rounds": self.rounds / p,
            "precision_of_accepted": self.accepted_clean / max(self.accepted, 1),
        }


def self_reflective_augment(
    split: CIRSplit,
    silhouettes: np.ndarray,
    editor: Editor,
    critic: Critic,
    n: int,
    max_retries: int = 2,
    seed: int = 0,
) -> tuple[CIRSplit, AugmentStats]:
    """Return ``split`` extended with up to ``n`` accepted single-attribute edit triplets."""
    if split.attributes is None or split.descriptions is None:
        raise ValueError("augmentation needs attribute labels and descriptions (synthetic benchmark)")
    rng = np.random.default_rng(seed)
    stats = AugmentStats()
    new_ids, new_imgs, new_attrs, new_trip, descs = [], [], [], [], dict(split.descriptions)
    category_of = {i: cat for cat, gal in split.galleries.items() for i in gal}
    for p in range(n):
        r = int(rng.integers(len(split.ids)))
        ref_id, ref = split.ids[r], Attributes(*[int(v) for v in split.attributes[r]])
        options = [g for g in GROUPS if g not in ("category", *RELATIVE_GROUPS)  # the critic checks named values
                   and not (g == "scale" and ref.pattern == 0)]
        intended = str(rng.choice(options))
        prop = editor.propose(ref, silhouettes[garment_of(ref_id)], ref_id, intended, rng)
        verdict = critic.check(split.images[r], prop, ref)
        stats.proposals += 1
        stats.accepted_first_try += verdict.accepted
        rounds = 1
        while not verdict.accepted and rounds <= max_retries:
            prop = editor.refine(prop, verdict, ref, rng)
            verdict = critic.check(split.images[r], prop, ref)
            rounds += 1
        stats.rounds += rounds
        if not verdict.accepted:
            continue
        stats.accepted += 1
        stats.accepted_clean += prop.hidden_attrs is None or prop.hidden_attrs == prop.attrs
        iid = f"aug_{split.split}_{garment_of(ref_id):05d}_{p:05d}"
        new_ids.append(iid)
        new_imgs.append(prop.image)
        new_attrs.append(prop.attrs.as_list())
        descs[iid] = prop.description
        cat = category_of.get(ref_id, next(iter(split.galleries)))
        new_trip.append(Triplet(ref_id, iid, prop.text, cat, [intended]))
    if not new_ids:
        return split, stats
    galleries = {c: list(g) for c, g in split.galleries.items()}
    for iid, t in zip(new_ids, new_trip, strict=False):
        galleries[t.category].append(iid)
    out = CIRSplit(
        split.name + "+aug",
        split.split,
        split.ids + new_ids,
        np.concatenate([split.images, np.stack(new_imgs)]),
        split.triplets + new_trip,
        galleries,
        descs,
        np.concatenate([split.attributes, np.array(new_attrs, np.int64)]),
        split.exclude_reference,
    )
    return out, stats
