"""The deep-ask benchmark's summary and question choice (the runs themselves need an idle machine)."""

from dspy_rag.evals.bench_ask_deep import questions, summary


def run(seconds: float, steps: int, lm_seconds: float = 9.0, program_seconds: float = 10.0) -> dict:
    return {"seconds": seconds, "steps": steps, "lm_seconds": lm_seconds, "program_seconds": program_seconds,
            "peak_rss_mb": 900 + steps}


def test_the_two_and_three_step_median_leaves_out_other_plans() -> None:
    result = summary([run(20.0, 1), run(60.0, 2), run(80.0, 3), run(300.0, 4)])
    assert result["seconds_median_2_3_steps"] == 70.0 and result["runs_2_3_steps"] == 2
    assert result["seconds_median"] == 70.0 and result["steps"] == {"1": 1, "2": 1, "3": 1, "4": 1}
    assert result["outside_lm_share_median"] == 0.1 and result["peak_rss_mb"] == 904
    assert summary([run(20.0, 1)])["seconds_median_2_3_steps"] is None


def test_the_reference_question_comes_first_then_questions_that_join_sources() -> None:
    asked = questions(3)
    assert asked[0].startswith("Based on NVIDIA's fiscal 2023 10-K, identify its key risks related to competition.")
    assert len(asked) == 3 and len(set(asked)) == 3
