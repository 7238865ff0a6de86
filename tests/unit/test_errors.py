"""pipeline.errors: the one walk down an exception's causes and the one-line reason."""

from __future__ import annotations

from pipeline.errors import CommitError, FencedError, causes, is_fencing_error, one_line


def _wrapped(inner: BaseException) -> RuntimeError:
    try:
        try:
            raise inner
        except BaseException as e:
            raise ValueError("while committing") from e
    except ValueError as e:
        try:
            raise RuntimeError("Py4JJavaError: batch failed\n\tat java.lang.Thread.run") from e
        except RuntimeError as outer:
            return outer


def test_causes_walks_each_exception_once() -> None:
    inner = KeyError("k")
    outer = _wrapped(inner)
    assert [type(e) for e in causes(outer)] == [RuntimeError, ValueError, KeyError]
    loop = ValueError("a")
    loop.__cause__ = loop  # a cycle ends the walk
    assert list(causes(loop)) == [loop]


def test_a_fencing_error_is_found_under_wrappers_and_in_their_text() -> None:
    assert is_fencing_error(_wrapped(FencedError("epoch 3 owns the table")))
    assert is_fencing_error(RuntimeError("[ingest:fenced] epoch 3 owns the table"))
    assert not is_fencing_error(_wrapped(CommitError("the catalog said no")))


def test_one_line_names_the_pipeline_error_else_the_type_and_first_line() -> None:
    assert one_line(_wrapped(CommitError("the catalog said no"))) == "the catalog said no"
    assert one_line(_wrapped(KeyError("k"))) == "RuntimeError: Py4JJavaError: batch failed"
    assert one_line(ValueError()) == "ValueError"
    assert one_line("a  reason\nover   lines") == "a reason over lines"
    long = one_line("x" * 500, limit=50)
    assert len(long) == 50 and long.endswith("…")
