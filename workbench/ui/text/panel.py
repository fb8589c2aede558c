"""The answers panel: real sentences in, and whether fusion, int8 and fp16 change the model's answers."""

from __future__ import annotations

from ...viz.summary import answers_verdict, task_parity_words
from ..panel import Panel, badge, esc


def answers_html(rows) -> str:
    """One row per precision (int8, fp16): the answer-level check against the unfused export."""
    if not rows:
        return ""
    out = []
    for a in rows:
        if "error" in a:
            out.append(f"<tr><td>{esc(a['name'])}</td><td colspan='4'>{esc(a['error'])}</td></tr>")
            continue
        kind = a.get("kind", "")
        main, ok = task_parity_words(a), answers_verdict(a)  # the one formatter, the one policy
        changed = a.get("changed") or []
        out.append(f"<tr><td>{esc(a['name'])}</td><td>{esc(kind)}</td><td>{esc(main)}</td>"
                   f"<td>{a.get('max_abs_diff', float('nan')):.2e} / {a.get('cosine', float('nan')):.5f}</td>"
                   f"<td>{badge(ok, 'same answers' if ok else 'unknown' if ok is None else 'answers change')}"
                   f"{' ' + str(len(changed)) + ' neighbours changed' if changed else ''}</td></tr>")
    return ("<div class='wb-table'><table><tr><th>precision</th><th>check</th><th>answers against the unfused "
            "export</th><th>max abs diff / cosine</th><th></th></tr>" + "".join(out) + "</table></div>")


class TextPanel(Panel):
    """A box for sentences (one per line; empty: the built-in set), a Check answers button, the text's
    description, whether the benchmark times on these sentences' lengths, and the precision rows."""

    def __init__(self, state, controller):
        super().__init__(state, controller)
        import ipywidgets as W

        L = W.Layout
        self._quiet: list = []
        self.w_text = W.Textarea(placeholder="one sentence per line; leave empty for the built-in English sentences",
                                 rows=4, layout=L(width="98%"))
        self.w_check = W.Button(description="Check answers", icon="check", layout=L(width="150px"),
                                tooltip="tokenize the sentences with the model's tokenizer, then check every fusion "
                                        "step, int8 and fp16 on them: same ranking, same filled-in word, same label?")
        self.w_check.on_click(lambda _: self.act(self.controller.text_answers.use_text, self.w_text.value or None))
        self.w_on_text = W.Checkbox(value=state.bench_on_text, indent=False,
                                    description="benchmark on these sentences' lengths (p50/p90/p99 over the mix)")
        self.w_on_text.observe(lambda ch: None if self._quiet else self.controller.configure(bench_on_text=ch["new"]),
                               "value")
        self.w_line = W.HTML()
        self.w_answers = W.HTML()
        self.w_answers.add_class("wb-answers")
        self.widget = W.VBox([
            W.HTML("<div class='wb-section'>Answers on real text <span style='font-weight:normal;font-size:11px'>"
                   "(does fusion, int8 or fp16 change what the model answers? random-weight presets answer "
                   "nonsense, so use a real model, e.g. minilm)</span></div>"),
            self.w_text, W.HBox([self.w_check, self.w_on_text], layout=L(align_items="center")),
            self.w_line, self.w_answers])
        self.widget.add_class("wb-text-panel")
        self.watch("text_line", lambda: setattr(self.w_line, "value",
                                                f"<span style='font-size:11px'>{esc(self.state.text_line)}</span>"))
        self.watch("answers", lambda: setattr(self.w_answers, "value", answers_html(self.state.answers)))
        self.watch("jobs", self.draw_busy)
        self.watch("bench_on_text", lambda: self.silently(self.w_on_text, "value", self.state.bench_on_text,
                                                          self._quiet))

    def draw_busy(self) -> None:
        j = self.state.jobs.get("answers")
        self.w_check.disabled = bool(j and j.running)


__all__ = ["TextPanel", "answers_html"]
