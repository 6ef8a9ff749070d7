"""Evaluation conventions: every choice on which libraries disagree is a named, logged option."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace
from typing import Any

__all__ = ["CHOICES", "PRESETS", "Options", "resolve_options"]

#: Allowed values of each categorical option, default first.
CHOICES: dict[str, tuple[str, ...]] = {
    "ap_denominator": ("min_k_relevant", "relevant", "hits"),
    "gain": ("exponential", "linear"),
    "tie_break": ("item_asc", "item_desc", "input_order"),
    "id_order": ("natural", "string"),
    "user_set": ("truth", "intersection"),
    "empty_users": ("skip", "zero"),
    "average": ("macro", "micro"),
    "diversity_similarity": ("cosine", "jaccard"),
    "serendipity_method": ("popularity", "history"),
}


@dataclass(frozen=True)
class Options:
    """The conventions one evaluation uses; ``asdict`` of it is what gets logged next to numbers."""

    ap_denominator: str = "min_k_relevant"
    gain: str = "exponential"
    tie_break: str = "item_asc"
    id_order: str = "natural"
    user_set: str = "truth"
    empty_users: str = "skip"
    average: str = "macro"
    relevance_threshold: float = 1.0
    diversity_similarity: str = "cosine"
    serendipity_method: str = "popularity"
    calibration_alpha: float = 0.01
    preset: str = "default"

    def __post_init__(self) -> None:
        for name, allowed in CHOICES.items():
            value = getattr(self, name)
            if value not in allowed:
                raise ValueError(
                    f"option {name!r} must be one of {', '.join(map(repr, allowed))} "
                    f"(got {value!r})"
                )
        thr = self.relevance_threshold
        if isinstance(thr, bool) or not isinstance(thr, int | float) or not thr > 0:
            raise ValueError(f"option 'relevance_threshold' must be a number > 0 (got {thr!r})")
        alpha = self.calibration_alpha
        if isinstance(alpha, bool) or not isinstance(alpha, int | float) or not 0 < alpha <= 1:
            raise ValueError(
                f"option 'calibration_alpha' must be a number in (0, 1] (got {alpha!r})"
            )

    def as_dict(self) -> dict[str, Any]:
        """Plain dict of every option (preset resolved), for logging."""
        return asdict(self)


#: Named bundles of options reproducing a library's conventions.
PRESETS: dict[str, dict[str, Any]] = {
    "default": {},
    # trec_eval 10.0 without -c; pass user_set="truth" on top for `trec_eval -c`.
    "trec_eval": {
        "ap_denominator": "relevant",
        "gain": "linear",
        "tie_break": "item_desc",
        "id_order": "string",  # trec_eval compares docnos with strcmp, also when they are numbers
        "user_set": "intersection",
        "empty_users": "zero",
        "average": "macro",
    },
}


def resolve_options(preset: str | None = None, **overrides: Any) -> Options:
    """Build :class:`Options` from a preset plus explicit overrides (overrides win).

    >>> resolve_options("trec_eval").gain
    'linear'
    >>> resolve_options("trec_eval", user_set="truth").user_set
    'truth'
    """
    name = "default" if preset is None else preset
    if name not in PRESETS:
        raise ValueError(
            f"option 'preset' must be one of {', '.join(map(repr, PRESETS))} (got {name!r})"
        )
    known = {f.name for f in fields(Options)} - {"preset"}
    unknown = sorted(set(overrides) - known)
    if unknown:
        raise ValueError(
            f"unknown option {unknown[0]!r}; known options: {', '.join(sorted(known))}, preset"
        )
    values = {**PRESETS[name], **{k: v for k, v in overrides.items() if v is not None}}
    return replace(Options(preset=name), **values)
