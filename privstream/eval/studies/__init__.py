"""The built-in studies of ``privstream eval``: importing this package registers each of them.

A study is one module here that calls :func:`privstream.eval.harness.register_study` at import; add
its import below (see docs/eval.md, "How to add a study")."""

from privstream.eval.studies import chan, dpsw, hg_ldp, lebeda_tetek, streaming

__all__ = ["chan", "dpsw", "hg_ldp", "lebeda_tetek", "streaming"]
