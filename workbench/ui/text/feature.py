"""The text feature: answers checked on real sentences, per fusion step and for int8 / fp16.

:class:`TextAnswers` writes ``state.sentences``, ``state.text_line`` and ``state.answers`` of the one
:class:`~workbench.ui.state.AppState` (and the controller's ``text``, the batches every measurement then uses);
its work runs in the job runner's measure lane (:data:`~workbench.ui.measuring.feature.MEASURE_LANE`).
"""

from __future__ import annotations

from ...measure.variants.answers import task_answers
from ...text import text_batches
from ..jobs import Job
from ..measuring.feature import MEASURE_LANE


class TextAnswers:
    """``use_text``.

    Args:
        app: the controller: its ``state``, ``export_result``, ``timeline``, ``runner``, ``parity``, ``say`` and
            ``bump_generation``.
    """

    def __init__(self, app):
        self.app = app

    def use_text(self, sentences: list[str] | str | None = None, *, precisions: tuple[str, ...] = ("int8", "fp16")) -> None:
        """Check answers on real text: the sentences (a list, text with one per line, or None for the
        built-in set) are tokenized with the model's tokenizer; every step's parity then includes its
        task parity, and int8 / fp16 are checked against the unfused export (``state.answers``)."""
        app = self.app
        if app.timeline is None or app.export_result is None:
            app.say("load a model first", "error")
            return
        if isinstance(sentences, str):
            sentences = [line.strip() for line in sentences.splitlines() if line.strip()]
        s = app.state

        def work(job: Job) -> None:
            src = app.export_result.source
            job.progress(f"tokenizing with {src.name}'s tokenizer", 0.05)
            text = text_batches(src, sentences or None)
            d = text.describe()
            app.text = text
            with s.hold_trait_notifications():
                s.sentences = tuple(text.sentences)
                s.text_line = (f"{d['sentences']} sentences in {d['batches']} batches (lengths "
                               f"{', '.join(f'{k}×{v}' for k, v in d['bucket_mix'].items())}; "
                               f"{d['padding_share'] * 100:.0f}% padding); check: {d['kind']}")
                s.answers = ()
            app.timeline.use_text(text)
            app.bump_generation()
            job.progress("task parity of every step", 0.1)
            app.parity.run_pass(job, False)
            if precisions:
                job.progress(f"answers of {', '.join(precisions)} against the unfused export", 0.6)
                res = task_answers(src, plan=app.timeline.plan, precisions=precisions, text=text,
                                   progress=lambda stage, f: job.progress(f"answers: {stage}", 0.6 + 0.4 * f))
                s.answers = tuple({"name": k, **v} for k, v in res["precisions"].items())
            app.say("answers checked on the text: see the answers column and the precision rows", "ok")

        app.runner.start("answers", work, lane=MEASURE_LANE)


__all__ = ["TextAnswers"]
