"""Exact identity stage: specific keys fire, ordinary words and bare numbers never do."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from memory_core.domain.model import Unit
from memory_core.retrieval.exact import ExactIndex


def unit(resource_id: str, ordinal: int, *heading_path: str) -> Unit:
    return Unit(f"{resource_id}#{ordinal}", resource_id, ordinal, 0, 1, heading_path, "body", 1, "h")


ADR = "decisions/ADR-0042-use-postgres.md"
UNITS = [
    unit(ADR, 0, "ADR-0042: Use Postgres"),
    unit(ADR, 1, "ADR-0042: Use Postgres", "Consequences"),
    unit("runbooks/rollback.md", 0, "Rollback runbook"),
    unit("runbooks/rollback.md", 1, "Rollback runbook", "Reversing a bad migration"),
    unit("conventions/naming.md", 0, "Naming", "The posting_engine package"),
    unit("conventions/naming.md", 1, "Naming", "PostingBatcher class"),
    unit("5.md", 0, "experimental investigation of the aerodynamics of a wing"),
]
INDEX = ExactIndex(UNITS)


def ids(query: str) -> list[str]:
    return [m.unit_id for m in INDEX.search(query)]


def test_identifier_path_file_name_and_slug_keys() -> None:
    assert ids("why ADR-0042?") == [f"{ADR}#0", f"{ADR}#1"]
    assert ids("adr-0042") == [f"{ADR}#0", f"{ADR}#1"]  # the query side is case-insensitive
    assert ids("see runbooks/rollback.md please")[:2] == ["runbooks/rollback.md#0", "runbooks/rollback.md#1"]
    assert ids("open rollback.md") == ["runbooks/rollback.md#0", "runbooks/rollback.md#1"]
    assert ids("steps for reversing a bad migration") == ["runbooks/rollback.md#1"]
    assert ids("where is `posting_engine`?") == ["conventions/naming.md#0"]
    assert ids("PostingBatcher flush") == ["conventions/naming.md#1"]


def test_most_specific_key_ranks_first() -> None:
    matches = INDEX.search("runbooks/rollback.md and ADR-0042")
    assert [m.unit_id for m in matches][:2] == ["runbooks/rollback.md#0", "runbooks/rollback.md#1"]
    assert matches[0].score > matches[-1].score


def test_ordinary_words_and_bare_numbers_never_match() -> None:
    assert ids("mach 5 flow over a wing") == []
    assert ids("rollback naming postgres") == []
    assert ids("0042") == []


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.sampled_from(["the", "flow", "mach", "5", "wing", "rollback", "naming", "of", "a", "2", "postgres"]))
)
def test_plain_lowercase_prose_never_matches(words: list[str]) -> None:
    assert INDEX.search(" ".join(words)) == []


def test_a_title_or_heading_several_resources_share_is_no_key() -> None:
    shared = ExactIndex(
        [
            unit("a.md", 0, "Information Retrieval Systems"),
            unit("b.md", 0, "Information Retrieval Systems"),
            unit("c.md", 0, "Setup", "How to run the tests"),
            unit("d.md", 0, "Guide", "How to run the tests"),
            unit("e.md", 0, "Information retrieval systems INC-7"),  # its identifier still names it
            unit("f.md", 0, "Evaluating information retrieval systems"),  # one resource: a key
        ]
    )

    def found(query: str) -> list[str]:
        return [m.unit_id for m in shared.search(query)]

    assert found("training for users of information retrieval systems") == []
    assert found("how to run the tests quickly") == []
    assert found("what happened in INC-7") == ["e.md#0"]
    assert found("evaluating information retrieval systems") == ["f.md#0"]
    # The same title in one resource's several units is still that resource's key.
    single = ExactIndex(
        [unit("h.md", 0, "Information Retrieval Systems"), unit("h.md", 1, "Information Retrieval Systems", "Scope")]
    )
    assert [m.unit_id for m in single.search("information retrieval systems")] == ["h.md#0", "h.md#1"]


def test_an_identifier_several_resources_share_is_no_key() -> None:
    # exact-identity-v3: SciFact's abstracts share "PD-1" or "HIV-1" in their titles; the identifier
    # names none of them, while one resource's own identifier and every path key still match.
    shared = ExactIndex(
        [
            unit("a.md", 0, "PD-1 blockade in melanoma"),
            unit("b.md", 0, "PD-1 expression on T cells"),
            unit("b.md", 1, "PD-1 expression on T cells", "Methods"),
            unit("c.md", 0, "CED-10 kills viable cells"),
            unit("d.md", 0, "Notes", "The posting_engine package"),
            unit("e.md", 0, "Guide", "The posting_engine package"),
            unit("src/PD-1.md", 0, "Receptors"),
        ]
    )

    def found(query: str) -> list[str]:
        return [m.unit_id for m in shared.search(query)]

    # The titles' shared identifier is no key; the one file named after it still is (a file-name key).
    assert found("Responses to PD-1 blockade") == ["src/PD-1.md#0"]
    assert found("how does posting_engine batch") == []
    assert found("Activation of CED-10 in mutants") == ["c.md#0"]


def test_an_identifier_in_a_resources_own_path_names_it_however_many_share_it() -> None:
    # The review of exact-identity-v3 found path identifiers dropped with the titles' ones: an ADR
    # lost its own key when a meeting note's heading mentioned it, and an incident's files theirs.
    index = ExactIndex(
        [
            unit(ADR, 0, "ADR-0042: Use Postgres"),
            unit("notes/meeting.md", 0, "Weekly", "Follow up on ADR-0042"),
            unit("incidents/INC-7/timeline.md", 0, "Timeline"),
            unit("incidents/INC-7/postmortem.md", 0, "Postmortem"),
            unit("services/payment_api/readme.md", 0, "Payments"),
            unit("services/payment_api/deploy.md", 0, "Deploying"),
            unit("notes/other.md", 0, "Other", "Calling payment_api from jobs"),
        ]
    )

    def found(query: str) -> set[str]:
        return {m.unit_id for m in index.search(query)}

    # The path's identifier keeps naming the ADR; the meeting note's heading mention, shared with
    # the ADR's title, names neither (v2 put both first).
    assert found("what did we decide in ADR-0042") == {f"{ADR}#0"}
    assert found("INC-7 root cause") == {"incidents/INC-7/timeline.md#0", "incidents/INC-7/postmortem.md#0"}
    assert found("payment_api deploy steps") == {"services/payment_api/readme.md#0", "services/payment_api/deploy.md#0"}
