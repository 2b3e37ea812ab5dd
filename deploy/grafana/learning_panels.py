"""The dashboard's "Learning" row: the traffic sampler, its shadow spend and its judge.

Every metric here is exported only by replicas with ``learning.enabled`` (docs/contracts.md#metrics);
elsewhere the panels stay empty. The alerts that read the same series are CascadeLearningSamplesDropped,
CascadeLearningStoreDown and CascadeShadowSpendNearCap (docs/operations.md#alerts).
"""

from __future__ import annotations

from typing import Any

from panel_kit import RI, SEL, TIER_SEL, UP_MAPPING, row, stat, timeseries


def learning_panels() -> list[dict[str, Any]]:
    """The row and its panels, in reading order."""
    return [
        row("Learning"),
        stat(
            "Traffic store",
            "cascade_learning_store_up per replica: DOWN from a failed or timed-out write to the "
            "traffic store until a write succeeds (samples are dropped meanwhile, clients are not "
            "affected). See the CascadeLearningStoreDown alert.",
            f"cascade_learning_store_up{{{SEL}}}",
            "{{instance}}",
            "none",
            mappings=UP_MAPPING,
            thresholds=[{"color": "red", "value": None}, {"color": "green", "value": 1}],
        ),
        stat(
            "Shadow budget used",
            "Per replica: shadow spend in the sliding hour over its cap "
            "(cascade_shadow_spend_window_usd / cascade_shadow_spend_cap_usd). Orange from 90%: "
            "samples that do not fit are dropped (spend_cap).",
            f"max by (instance) (cascade_shadow_spend_window_usd{{{SEL}}}"
            f" / cascade_shadow_spend_cap_usd{{{SEL}}})",
            "{{instance}}",
            "percentunit",
            thresholds=[{"color": "green", "value": None}, {"color": "orange", "value": 0.9}],
        ),
        stat(
            "Samples dropped (1h)",
            "Samples given up in the last hour, all replicas, drops at shutdown excepted "
            "(cascade_learning_dropped_total); the reasons are in the next panel.",
            f'sum(increase(cascade_learning_dropped_total{{{SEL}, reason!="shutdown"}}[1h]))',
            "dropped",
            "none",
            thresholds=[{"color": "green", "value": None}, {"color": "orange", "value": 1}],
        ),
        timeseries(
            "Samples drawn and dropped",
            "Answered cascade requests drawn for a sample, per tier "
            "(cascade_learning_sampled_total), and samples given up, per reason "
            "(cascade_learning_dropped_total: queue_full, spend_cap, store_error, shutdown, error). "
            "See the CascadeLearningSamplesDropped alert.",
            [
                (
                    f"sum by (tier) (rate(cascade_learning_sampled_total{{{TIER_SEL}}}[{RI}]))",
                    "sampled {{tier}}",
                ),
                (
                    f"sum by (reason) (rate(cascade_learning_dropped_total{{{SEL}}}[{RI}]))",
                    "dropped: {{reason}}",
                ),
            ],
            "ops",
        ),
        timeseries(
            "Traffic rows written and samples waiting",
            "Rows the traffic store accepted per second (cascade_learning_rows_written_total: one per "
            "pool model and sample) and the samples waiting for their shadow calls per replica "
            "(cascade_learning_queue_depth; beyond learning.queue_size they are dropped as queue_full).",
            [
                (f"sum(rate(cascade_learning_rows_written_total{{{SEL}}}[{RI}]))", "rows written / s"),
                (f"max by (instance) (cascade_learning_queue_depth{{{SEL}}})", "waiting: {{instance}}"),
            ],
            "short",
        ),
        timeseries(
            "Shadow spend in the last hour vs cap",
            "Per replica: shadow spend settled and reserved in the sliding hour "
            "(cascade_shadow_spend_window_usd) and its cap, learning.max_shadow_usd_per_hour "
            "(cascade_shadow_spend_cap_usd). Samples that do not fit are dropped (spend_cap). See the "
            "CascadeShadowSpendNearCap alert.",
            [
                (f"max by (instance) (cascade_shadow_spend_window_usd{{{SEL}}})", "{{instance}} spent"),
                (f"max by (instance) (cascade_shadow_spend_cap_usd{{{SEL}}})", "{{instance}} cap"),
            ],
            "currencyUSD",
        ),
        timeseries(
            "Shadow spend rate by model",
            "USD per hour of the sampler's own upstream calls (cascade_shadow_cost_usd_total), all "
            "replicas, stacked. Never part of the client spend above.",
            [(f"sum by (model) (rate(cascade_shadow_cost_usd_total{{{SEL}}}[{RI}])) * 3600", "{{model}}")],
            "currencyUSD",
            stack=True,
        ),
        timeseries(
            "Shadow calls by model and outcome",
            "cascade_shadow_calls_total: ok, failed, timeout, cancelled (cut at shutdown). A failed "
            "call leaves its model without a row for that sample.",
            [
                (
                    f"sum by (model, outcome) (rate(cascade_shadow_calls_total{{{SEL}}}[{RI}]))",
                    "{{model}} {{outcome}}",
                )
            ],
            "reqps",
            stack=True,
        ),
        timeseries(
            "Judge outcomes",
            "Labels given to sampled answers against the reference model's answer "
            "(cascade_judge_outcomes_total): agree, disagree, undecided (the judge cannot tell: "
            "label missing), error, no_reference (the reference call failed). A falling share of "
            "agree means the cheaper models answer differently from the reference than before.",
            [
                (
                    f"sum by (judge, outcome) (rate(cascade_judge_outcomes_total{{{SEL}}}[{RI}]))",
                    "{{judge}} {{outcome}}",
                )
            ],
            "ops",
            stack=True,
        ),
    ]
