"""The training health monitor on crafted metric streams: each warning at its onset, once, a
note when it clears, and silence for a healthy run."""

import math

from electra_tf import health

HEALTHY = {"loss": 12.0, "masked_lm_loss": 4.0, "disc_loss": 0.15, "masked_lm_accuracy": 0.55,
           "sampled_masked_lm_accuracy": 0.5, "replaced_fraction": 0.45, "disc_accuracy": 0.96,
           "disc_precision": 0.8, "disc_recall": 0.6, "disc_auc": 0.95, "grad_norm": 0.8}


def _run(stream, start_step=100, every=50, objective="electra"):
    """Feeds {step: metrics} through a pretraining monitor; returns {step: messages}."""
    monitor = health.pretraining_monitor(mask_prob=0.15, vocab_size=30522,
                                         start_step=start_step, objective=objective)
    out = {}
    for i, scalars in enumerate(stream):
        step = (i + 1) * every
        messages = monitor.update(step, scalars)
        if messages:
            out[step] = messages
        assert set(monitor.scalars()) == {f"health/{c.name}" for c in monitor.checks}
    return out


def test_a_healthy_run_gets_no_warning():
    noisy = [{**HEALTHY, "grad_norm": 0.8 + 0.3 * math.sin(i)} for i in range(40)]
    assert _run(noisy) == {}


def test_generator_running_away_warns_once_then_clears():
    # A discriminator that keeps up: its loss stays below the (lower) base-rate loss.
    runaway = {**HEALTHY, "replaced_fraction": 0.08, "disc_loss": 0.03}
    stream = [HEALTHY] * 4 + [runaway] * 3 + [HEALTHY]
    out = _run(stream)
    assert list(out) == [250, 400]
    assert out[250][0].startswith("WARNING (health): the generator's samples are the "
                                  "original token at 92%")
    assert "generator_hidden_size" in out[250][0]
    assert out[400] == ["health: generator_too_strong cleared"]


def test_discriminator_predicting_one_class():
    all_original = {**HEALTHY, "disc_recall": 0.0, "disc_accuracy": 0.94}
    all_replaced = {**HEALTHY, "disc_recall": 1.0, "disc_accuracy": 0.07}
    out = _run([HEALTHY] * 3 + [all_original] * 2 + [HEALTHY] + [all_replaced])
    assert "calls (almost) every token original" in out[200][0]
    assert out[300] == ["health: discriminator_one_class cleared"]
    assert "calls most tokens replaced" in out[350][0]


def test_loss_at_the_trivial_value():
    trivial_disc = health._binary_entropy(0.15 * 0.45)
    out = _run([HEALTHY] * 3 + [{**HEALTHY, "disc_loss": trivial_disc}])
    assert "is at the loss of always predicting" in out[200][0]
    out = _run([HEALTHY] * 3 + [{**HEALTHY, "masked_lm_loss": 10.2}])
    assert "uniform guess over the vocabulary (10.326)" in out[200][0]


def test_electra_15s_base_rate_is_the_replaced_fraction_of_the_masked_positions():
    # Judged at the masked positions only, a learning discriminator's loss sits far above
    # ELECTRA's all-token base rate H(0.15 x 0.45) and below its own, H(0.45).
    learning = {**HEALTHY, "disc_loss": 0.5}
    assert _run([learning] * 6, objective="electra_15") == {}
    assert "is at the loss of always predicting" in _run([learning] * 6)[100][0]
    trivial = {**HEALTHY, "disc_loss": health._binary_entropy(0.45)}
    assert "is at the loss of always predicting" in _run(
        [HEALTHY] * 3 + [trivial], objective="electra_15")[200][0]
    # Electric's noise-contrastive loss has no such base rate.
    assert _run([HEALTHY] * 3 + [{**HEALTHY, "disc_loss": 5.0}], objective="electric") == {}


def test_two_stage_first_stage_has_no_discriminator_to_check():
    # Stage 1 weights the discriminator's metrics out: they read 0.
    stage_1 = {**HEALTHY, "stage": 1.0, "disc_loss": 0.0, "disc_recall": 0.0,
               "disc_accuracy": 0.0}
    assert _run([stage_1] * 6) == {}
    stage_2 = {**stage_1, "stage": 2.0}
    assert "calls (almost) every token original" in _run([stage_1] * 3 + [stage_2])[200][0]


def test_no_model_warning_before_the_start_step():
    sick = {**HEALTHY, "replaced_fraction": 0.01, "disc_recall": 0.0, "masked_lm_loss": 10.3}
    out = _run([sick] * 5, start_step=1000)
    assert out == {}


def test_gradient_explosion_against_the_recent_median():
    norms = [0.9, 1.1, 1.0, 0.95, 1.05, 1.0, 30.0, 25.0, 1.0]
    out = _run([{**HEALTHY, "grad_norm": n} for n in norms])
    assert list(out) == [350, 450]
    assert "jumped to 30" in out[350][0] and "30x its median" in out[350][0]
    assert out[450] == ["health: gradient_explosion cleared"]
    # Too little history: no verdict; a NaN norm is the loop's business, not the monitor's.
    assert _run([{**HEALTHY, "grad_norm": n} for n in (1.0, 50.0, math.nan)]) == {}


def test_finetuning_monitor_watches_the_gradient_only():
    monitor = health.finetuning_monitor()
    messages = [monitor.update(i, {"loss": 0.5, "grad_norm": n})
                for i, n in enumerate([1.0] * 6 + [40.0])]
    assert messages[-1] and "jumped to 40" in messages[-1][0]
    assert not any(messages[:-1])
