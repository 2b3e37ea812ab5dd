"""Fit a ``policies.router.LinearRouter``: optional principal components, standardization and one
logistic regression per model, folded into one linear map per model.

Everything is fitted on the rows it is given (a split's calibration rows): the principal
components too, so held-out rows never shape the features. Folding is exact algebra: with
``u = (x - m) P^T`` (components), ``z = (u - mu) / sd`` and ``logit = z . w + b``,
``logit = x . (P^T (w / sd)) + b - (m P^T + mu) . (w / sd)``.
"""

from __future__ import annotations

import numpy as np

from policies.router import LinearRouter

DEFAULT_COMPONENTS = 16  # as the paper's diagnostic router: a few principal components of the embedding
_CONSTANT_LOGIT_CAP = 8.0  # a model right (or wrong) on every row: p = sigmoid(+-8), not exactly 0 or 1


def fit_linear_router(
    features: np.ndarray,
    quality: np.ndarray,
    models: tuple[str, ...],
    feature_set: str,
    *,
    components: int | None = DEFAULT_COMPONENTS,
    seed: int = 0,
) -> LinearRouter:
    """One correctness model per column of ``quality`` (labels: quality >= 0.5) on ``features``.

    ``components``: keep that many principal components of the features (None: all features).
    A model whose labels are all one class gets a constant probability (its rate, capped away
    from 0 and 1).
    """
    from sklearn.decomposition import PCA
    from sklearn.linear_model import LogisticRegression

    x = np.asarray(features, dtype=np.float64)
    dims = x.shape[1]
    center = x.mean(axis=0)
    if components is not None and components < min(x.shape):
        pca = PCA(n_components=components, random_state=seed).fit(x)
        projection = pca.components_.T  # (d, c)
        center = pca.mean_
    else:
        projection = np.eye(dims)
    reduced = (x - center) @ projection
    mu = reduced.mean(axis=0)
    sd = reduced.std(axis=0)
    sd[sd == 0] = 1.0
    scaled = (reduced - mu) / sd

    coef = np.zeros((quality.shape[1], dims))
    intercept = np.zeros(quality.shape[1])
    for j, column in enumerate(np.asarray(quality).T):
        labels = column >= 0.5
        if labels.all() or not labels.any():
            rate = float(np.clip(labels.mean(), 1e-3, 1 - 1e-3))
            intercept[j] = float(
                np.clip(np.log(rate / (1 - rate)), -_CONSTANT_LOGIT_CAP, _CONSTANT_LOGIT_CAP)
            )
            continue
        fitted = LogisticRegression(max_iter=1000, random_state=seed).fit(scaled, labels)
        weights = fitted.coef_[0] / sd
        coef[j] = projection @ weights
        intercept[j] = float(fitted.intercept_[0] - (center @ projection + mu) @ weights)
    return LinearRouter(feature_set, tuple(models), coef, intercept)
