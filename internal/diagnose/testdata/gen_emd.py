#!/usr/bin/env python3
"""Generates emd.json, the fixtures TestEMDAgainstScipy checks EMD and
Wasserstein against.

The expected values come from scipy.stats.wasserstein_distance, an
implementation independent of ours. For each case the script stores the
raw distance ("w1") and the distance after scaling both samples so that the
larger of the two (weighted) means is 1 ("emd", Shen et al. SIGMETRICS 2009
§3.1), scaling done here with numpy before calling scipy.

Run from this directory (needs numpy and scipy, e.g. `pip install scipy`):

    python3 gen_emd.py > emd.json

The output is committed, so the Go test needs no Python.
"""
import json

import numpy as np
from scipy.stats import wasserstein_distance

rng = np.random.default_rng(20090615)


def case(name, t, r, tw=None, rw=None):
    t = np.asarray(t, dtype=float)
    r = np.asarray(r, dtype=float)
    mt = np.average(t, weights=tw)
    mr = np.average(r, weights=rw)
    scale = max(abs(mt), abs(mr))
    out = {
        "name": name,
        "target": {"values": t.tolist()},
        "reference": {"values": r.tolist()},
        "w1": wasserstein_distance(t, r, tw, rw),
        "scale": scale,
        "emd": wasserstein_distance(t / scale, r / scale, tw, rw),
    }
    if tw is not None:
        out["target"]["weights"] = list(map(float, tw))
    if rw is not None:
        out["reference"]["weights"] = list(map(float, rw))
    return out


cases = [
    case("single points", [3.0], [5.0]),
    case("identical", [1, 2, 3], [1, 2, 3]),
    case("shifted", [0, 1, 3], [5, 6, 8]),
    case("different sizes", [1, 2], [1, 1, 1, 4, 9]),
    case("ties across sides", [1, 1, 2, 2, 2, 7], [2, 2, 7, 7, 1]),
    case("weighted", [0, 1, 3], [5, 6, 8], [0.5, 0.25, 0.25], [1, 2, 3]),
    case("zero weights", [1, 2, 100], [1, 2, 3], [1, 1, 0], [0, 1, 1]),
    case("mixed signs", [-4, -1, 2, 5], [-2, 0, 0, 3]),
    case("negative only", [-10, -12, -11], [-5, -6]),
    case("request sizes KiB", [4] * 30 + [128] * 10, [128] * 35 + [256] * 5),
    case("tiny scale", (rng.exponential(1e-6, 50)).tolist(), (rng.exponential(2e-6, 70)).tolist()),
    case("huge scale", (rng.normal(5e9, 1e9, 40)).tolist(), (rng.normal(6e9, 2e9, 60)).tolist()),
    case("lognormal delays", rng.lognormal(3, 1, 500).tolist(), rng.lognormal(3.3, 0.7, 800).tolist()),
    case("weighted random", rng.gamma(2, 3, 200).tolist(), rng.gamma(3, 2, 150).tolist(),
         rng.uniform(0, 5, 200).tolist(), rng.integers(1, 10, 150).tolist()),
    case("rounded ties", np.round(rng.normal(10, 3, 300)).tolist(), np.round(rng.normal(11, 2, 300)).tolist()),
]

# One case per line: diffs of a regenerated file stay readable.
print('{"generator": "scipy.stats.wasserstein_distance", "cases": [')
print(",\n".join(json.dumps(c) for c in cases))
print("]}")
