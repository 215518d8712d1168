"""Retrieve-and-fit part decoder: real component meshes indexed by their autoencoder latents.

Assembly-based modelling (Funkhouser et al. 2004, "Modeling by example"; Kalogerakis et al. 2012;
ComplementMe, Sung et al. 2017): every training part's mesh is kept in its box frame with its
autoencoder latent and its box size. A generated part (latents ``z (T, d)`` + box) takes one of
the ``k`` library components nearest to it, the seed choosing which, scaled into the generated box
in its source orientation by an anisotropic scale whose largest / smallest axis ratio is capped at
``MAX_DISTORTION`` (``fitted_scale``; the part is centred in its box when the cap binds).

Distance: the mean squared difference of the standardised, flattened latents plus ``SIZE_WEIGHT``
× the squared difference of the log box sizes, among the components of the requested category (all
components for ``'none'`` or a category without any); both constants were chosen on the val split.
A part generated alike to an earlier part of the same shape (latent distance plus squared log-size
difference under ``SHARE_DISTANCE``) takes that part's component, so a chair's four legs match.
Component meshes are decimated to at most ``MAX_FACES`` triangles (open3d's quadric decimation) and
their box-frame vertices stored in float16.

On disk, ``library.npz`` beside a pipeline's files: per component ``latents (N, T·d)``
(standardised with the stored ``z_mean`` / ``z_std``), ``sizes (N, 3)``, ``category (N,)`` (index
into ``data.CATEGORIES``), ``source (N,)`` (row of the per-shape ``source_*`` columns: name,
creator, licence) and ``part_names (N,)``; the meshes as ``vertices`` / ``faces`` / ``face_colors``
(uint8 RGB per face, the archive's materials) with ``vertex_offsets`` / ``face_offsets (N + 1,)``.
"""

from __future__ import annotations

import csv
import zipfile
import zlib
from dataclasses import dataclass, fields
from pathlib import Path

import numpy as np
import torch
import trimesh

from common.errors import CheckpointError, DataError
from common.io import atomic_write
from generation3d.data import CATEGORIES, PartDataset, face_colours
from generation3d.geometry import to_canonical

LIBRARY_FILE = "library.npz"
DECODERS = ("retrieve", "points")  # part latents -> meshes: real components (this module) or decoded points meshed
MAX_FACES = 1500  # triangles per stored component (decimated above)
K_NEAREST = 3  # a generated part takes one of its K nearest components, chosen by the seed
# chosen on val (experiments/generation3d/decoder_choice.py, decoder_choice*.json): the size term
# raises the final meshes' category fidelity (0.78 -> 0.87 on the val shapes); a 2:1 cap fits the
# val parts within 1 % of no cap (1.5:1 leaves parts short of their boxes)
SIZE_WEIGHT = 1.0  # weight of the squared log-size difference against the latent distance
MAX_DISTORTION = 2.0  # largest / smallest axis scale when a component is fitted into a box
SHARE_DISTANCE = 0.05  # parts closer than this to an earlier part of the shape reuse its component
THIN = 0.05  # an axis below this fraction of the component's largest size is not stretched alone


def decimate(mesh: trimesh.Trimesh, max_faces: int = MAX_FACES) -> trimesh.Trimesh:
    """``mesh`` with at most ``max_faces`` triangles (open3d quadric decimation above it), its face
    colours carried through vertex colours (a vertex takes the colour of a face it belongs to)."""
    if len(mesh.faces) <= max_faces:
        return mesh
    import open3d as o3d

    vertex_colours = np.zeros((len(mesh.vertices), 3))
    vertex_colours[mesh.faces.reshape(-1)] = np.repeat(face_colours(mesh), 3, axis=0) / 255.0
    m = o3d.geometry.TriangleMesh(o3d.utility.Vector3dVector(np.asarray(mesh.vertices, np.float64)),
                                  o3d.utility.Vector3iVector(np.asarray(mesh.faces, np.int32)))
    m.vertex_colors = o3d.utility.Vector3dVector(vertex_colours)
    m = m.simplify_quadric_decimation(target_number_of_triangles=max_faces)
    faces = np.asarray(m.triangles)
    colours = np.asarray(m.vertex_colors)[faces].mean(1) * 255.0
    return trimesh.Trimesh(np.asarray(m.vertices), faces, face_colors=np.round(colours).astype(np.uint8), process=False)


def fitted_scale(target: np.ndarray, source: np.ndarray, max_distortion: float = MAX_DISTORTION) -> np.ndarray:
    """Per-axis scale ``(3,)`` taking a box of size ``source`` towards ``target``: each axis's
    wanted scale clipped to within a factor ``sqrt(max_distortion)`` of their geometric mean, so
    exact for a near-uniform stretch and never more than ``max_distortion`` between axes. Thin
    axes of the source (under ``THIN`` of its largest) take the mean scale."""
    source = np.asarray(source, np.float64)
    target = np.asarray(target, np.float64)
    wide = source > THIN * source.max()
    log_a = np.log(np.maximum(target, 1e-9) / np.maximum(source, 1e-9))
    mean = log_a[wide].mean()
    half = np.log(max_distortion) / 2
    return np.exp(np.where(wide, mean + np.clip(log_a - mean, -half, half), mean))


@dataclass
class ComponentLibrary:
    """The components of a pipeline's training shapes (arrays as in the module docstring)."""

    latents: np.ndarray
    sizes: np.ndarray
    category: np.ndarray
    source: np.ndarray
    part_names: np.ndarray
    vertices: np.ndarray
    faces: np.ndarray
    face_colors: np.ndarray
    vertex_offsets: np.ndarray
    face_offsets: np.ndarray
    z_mean: np.ndarray
    z_std: np.ndarray
    source_name: np.ndarray
    source_creator: np.ndarray
    source_license: np.ndarray

    def __len__(self) -> int:
        return len(self.latents)

    @classmethod
    @torch.no_grad()
    def build(cls, pipe, ds: PartDataset, records: list[dict] | None = None, split: str = "train",
              max_faces: int = MAX_FACES) -> ComponentLibrary:
        """Every part of the ``split`` shapes of ``ds``, encoded by ``pipe.ae`` and standardised by
        ``pipe.stats``; ``records`` (one dict per dataset shape, ``shapes.csv``'s rows) name the
        sources. DataError when the dataset holds no meshes."""
        ids = ds.shape_ids(split)
        if len(ids) == 0 or ds.meshes is None:
            raise DataError(f"no {split} shapes with meshes to build a component library from")
        parts = ds.part_indices(split)
        owner = np.repeat(np.arange(len(ids)), [ds.n_parts(int(i)) for i in ids])
        dev = next(pipe.ae.parameters()).device  # encoded where the autoencoder is; nothing moves
        canon = torch.from_numpy(to_canonical(ds.points[parts], ds.boxes[parts])).float()
        z = torch.cat([pipe.ae.encode(c.to(dev)).cpu() for c in canon.split(256)]).numpy()  # (N, T, d)
        z_mean = np.broadcast_to(pipe.stats["z_mean"].cpu().numpy(), z.shape[1:])
        z_std = np.broadcast_to(pipe.stats["z_std"].cpu().numpy(), z.shape[1:])
        verts, faces, colours = [], [], []
        for p in parts:
            mesh = decimate(ds.part_mesh(int(p)), max_faces)
            centre, half = ds.boxes[p, :3], np.maximum(ds.boxes[p, 3:] / 2, 1e-9)
            verts.append(((np.asarray(mesh.vertices) - centre) / half).astype(np.float16))
            faces.append(np.asarray(mesh.faces, np.int32))
            colours.append(face_colours(mesh))
        rec = records if records is not None else [{} for _ in range(len(ds))]
        col = lambda key: np.array([str(rec[int(i)].get(key, "")) for i in ids])  # noqa: E731
        return cls(
            latents=((z - z_mean) / z_std).reshape(len(parts), -1).astype(np.float32), sizes=ds.boxes[parts, 3:].astype(np.float32),
            category=ds.category[ids][owner].astype(np.int16), source=owner.astype(np.int32),
            part_names=ds.part_names[parts], vertices=np.concatenate(verts), faces=np.concatenate(faces),
            face_colors=np.concatenate(colours),
            vertex_offsets=np.cumsum([0] + [len(v) for v in verts]).astype(np.int64),
            face_offsets=np.cumsum([0] + [len(f) for f in faces]).astype(np.int64),
            z_mean=np.asarray(z_mean, np.float32).reshape(-1), z_std=np.asarray(z_std, np.float32).reshape(-1),
            source_name=col("name"), source_creator=col("creator"), source_license=col("license"))

    @classmethod
    def arrays(cls) -> tuple[str, ...]:
        """The names of the arrays ``library.npz`` holds: the fields."""
        return tuple(f.name for f in fields(cls))

    def save(self, path: str | Path) -> Path:
        """Write ``library.npz`` into the directory ``path`` (atomically); returns its path."""
        out = Path(path) / LIBRARY_FILE
        with atomic_write(out, "wb") as f:
            np.savez_compressed(f, **{k: getattr(self, k) for k in self.arrays()})
        return out

    @classmethod
    def load(cls, path: str | Path) -> ComponentLibrary | None:
        """The library in the directory ``path`` (None when it has none); CheckpointError when the
        file is corrupt or its arrays do not fit together."""
        file = Path(path) / LIBRARY_FILE
        if not file.is_file():
            return None
        try:
            with np.load(file, allow_pickle=False) as z:
                missing = [k for k in cls.arrays() if k not in z.files]
                if missing:
                    raise CheckpointError(f"{file} is not a component library: no {', '.join(missing)} array")
                lib = cls(**{k: z[k] for k in cls.arrays()})
        except (OSError, ValueError, EOFError, zipfile.BadZipFile, zlib.error) as exc:
            raise CheckpointError(f"corrupt component library {file}: {exc}") from exc
        n = len(lib.latents)
        if not (lib.sizes.shape == (n, 3) and len(lib.category) == n and len(lib.source) == n
                and len(lib.vertex_offsets) == n + 1 and len(lib.face_offsets) == n + 1
                and lib.vertex_offsets[-1] == len(lib.vertices) and lib.face_offsets[-1] == len(lib.faces)
                and lib.face_colors.shape == (len(lib.faces), 3)
                and (lib.source < len(lib.source_name)).all()):
            raise CheckpointError(f"corrupt component library {file}: its arrays do not fit together")
        return lib

    def mesh(self, i: int) -> trimesh.Trimesh:
        """Component ``i`` in its box frame (vertices in ``[-1, 1]³``)."""
        v = self.vertices[self.vertex_offsets[i]: self.vertex_offsets[i + 1]].astype(np.float64)
        f = self.faces[self.face_offsets[i]: self.face_offsets[i + 1]]
        return trimesh.Trimesh(v, f, face_colors=self.face_colors[self.face_offsets[i]: self.face_offsets[i + 1]],
                               process=False)

    def coloured(self, i: int) -> bool:
        """Whether component ``i`` has colours of its own (not only trimesh's default grey)."""
        c = self.face_colors[self.face_offsets[i]: self.face_offsets[i + 1]]
        return bool((c != np.asarray(trimesh.visual.DEFAULT_COLOR[:3], np.uint8)).any())

    def standardise(self, z: np.ndarray) -> np.ndarray:
        """Raw part latents ``(..., T, d)`` as the library's keys ``(..., T·d)``."""
        z = np.asarray(z, np.float32)
        return (z.reshape(*z.shape[:-2], -1) - self.z_mean) / self.z_std

    def distances(self, key: np.ndarray, size: np.ndarray, candidates: np.ndarray,
                  size_weight: float = SIZE_WEIGHT) -> np.ndarray:
        """Distance of one generated part (``key (T·d,)`` from ``standardise``, box ``size (3,)``)
        to each of ``candidates`` (see the module docstring)."""
        return part_distance(key, size, self.latents[candidates], self.sizes[candidates], size_weight)

    def choose(self, latents: np.ndarray, boxes: np.ndarray, category: str, seed: int,
               k: int = K_NEAREST) -> np.ndarray:
        """The component ``(P,)`` for each generated part (``latents (P, T, d)``, ``boxes (P, 6)``)."""
        cat = CATEGORIES.index(category) if category in CATEGORIES else -1
        candidates = np.nonzero(self.category == cat)[0]
        if len(candidates) == 0:
            candidates = np.arange(len(self))
        rng = np.random.default_rng([seed, len(boxes)])
        keys = self.standardise(latents)
        chosen = np.zeros(len(boxes), dtype=np.int64)
        for p in range(len(boxes)):
            pick = rng.integers(min(k, len(candidates)))
            alike = part_distance(keys[p], boxes[p, 3:], keys[:p], boxes[:p, 3:], 1.0) < SHARE_DISTANCE
            if alike.any():  # the first earlier part generated alike lends its component
                chosen[p] = chosen[int(np.argmax(alike))]
                continue
            d = self.distances(keys[p], boxes[p, 3:], candidates)
            chosen[p] = candidates[np.argsort(d, kind="stable")[pick]]
        return chosen

    def fit(self, i: int, box: np.ndarray, max_distortion: float = MAX_DISTORTION) -> trimesh.Trimesh:
        """Component ``i`` scaled into ``box (6,)`` (centre, size) with ``fitted_scale``."""
        mesh = self.mesh(i)
        half = self.sizes[i] / 2 * fitted_scale(box[3:], self.sizes[i], max_distortion)
        mesh.vertices = np.asarray(mesh.vertices) * half + np.asarray(box[:3], np.float64)
        return mesh

    def decode(self, latents: np.ndarray, boxes: np.ndarray, category: str, seed: int) -> tuple[list[trimesh.Trimesh], np.ndarray]:
        """Meshes of a generated shape's parts (in their components' colours) and the components used ``(P,)``."""
        chosen = self.choose(latents, boxes, category, seed)
        return [self.fit(int(i), b) for i, b in zip(chosen, boxes, strict=True)], chosen

    def attribution(self, components) -> list[dict]:
        """The source shapes of ``components`` (name, creator, licence), each once, in order."""
        seen = dict.fromkeys(int(self.source[i]) for i in components)
        return [{"name": str(self.source_name[s]), "creator": str(self.source_creator[s]),
                 "license": str(self.source_license[s])} for s in seen]


def part_distance(key: np.ndarray, size: np.ndarray, keys: np.ndarray, sizes: np.ndarray,
                  size_weight: float) -> np.ndarray:
    """Per row of ``keys (N, T·d)`` / ``sizes (N, 3)``: the mean squared key difference to ``key``
    plus ``size_weight`` × the squared difference of the log sizes to ``size``."""
    log_size = lambda s: np.log(np.maximum(s, 1e-6))  # noqa: E731
    return ((keys - key) ** 2).mean(-1) + size_weight * ((log_size(sizes) - log_size(size)) ** 2).sum(-1)


def credit_line(credits: list[dict], path) -> str:
    """One line naming the creators and licences of the items whose components a shape uses."""
    creators = ", ".join(sorted({c["creator"] for c in credits}))
    licences = ", ".join(sorted({c["license"] for c in credits}))
    return f"real components from {len(credits)} item(s) by {creators} ({licences}): credit them as {path} lists"


def add_decoder_arg(p) -> None:
    """``--decoder retrieve|points`` on an argparse parser."""
    p.add_argument("--decoder", default="retrieve", choices=DECODERS,
                   help="retrieve: real training components fitted into the generated boxes (falls back to points "
                        "without a component library); points: the decoded part points, meshed")


def read_records(data_dir: str | Path) -> list[dict] | None:
    """``shapes.csv`` of a real dataset as one dict per shape (None when the dataset has none)."""
    path = Path(data_dir) / "shapes.csv"
    if not path.is_file():
        return None
    with path.open(newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def dataset_library(pipe, ds: PartDataset) -> ComponentLibrary | None:
    """The retrieve decoder's ``library.ComponentLibrary`` of ``ds``'s training parts, with the
    sources named by its ``shapes.csv``; None when the dataset has no part meshes on disk."""
    if ds.root is None:
        return None
    with_meshes = ds if ds.meshes is not None else PartDataset.load(ds.root, with_meshes=True)
    if with_meshes.meshes is None:
        return None
    return ComponentLibrary.build(pipe, with_meshes, read_records(ds.root))
