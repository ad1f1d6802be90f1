"""How a model turn handles a structured result: repairs, cut-off answers and the final tool calls.

The agent loop itself is in ``_model_turn.py``; these are the rules of the
result schema's two strategies (the provider's JSON output, or a submit tool)
that a turn applies when it decides what its answer means.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from lg_core.content import Text, ToolResult
from lg_core.errors import OutputLimitError, StructuredResultError
from lg_core.messages import Message
from lg_core.result_schema import ResultSchema
from lg_core.run_result import RunResult

RESULT_ACCEPTED = "Result accepted."
NOT_RUN_AT_FINISH = "Not run: the run finished with the submitted result."


def answers_to_final_calls(message: Message, submitted_by: str | None) -> list[Message]:
    """The tool message answering the tool calls of a run's final message, if it has any.

    A result submitted through the result tool (the call ``submitted_by``) ends
    the run on an assistant message that calls it, and maybe other tools, which
    do not run. Left unanswered, those calls would be the last thing in the
    conversation, and the next run of the same session would send them without
    results, which providers reject. So each gets one, as every other call does.
    """
    if not message.tool_uses:
        return []
    results = [
        ToolResult(tool_use_id=use.id, content=(Text(text=RESULT_ACCEPTED),), status="success")
        if use.id == submitted_by
        else ToolResult(tool_use_id=use.id, content=(Text(text=NOT_RUN_AT_FINISH),), status="error")
        for use in message.tool_uses
    ]
    return [Message(role="tool", content=results)]


def refuse_tool_work_in_repair(tool_uses: Any, spec: ResultSchema, strategy: str | None) -> None:
    """StructuredResultError for a repair turn's answer that calls a tool other than the submit tool.

    The repair turn offers only the way to answer (the submit tool, or none with
    the provider strategy), so such a call is the second invalid response, which
    the spec ends the run with. It never runs. A valid submission beside it is
    still taken, as in any turn; the other calls are then answered as not run.
    """
    submit = spec.tool_name() if strategy == "tool" else None
    others = [use.name for use in tool_uses if use.name != submit]
    if not others or (submit is not None and len(others) < len(tool_uses)):
        return
    offered = f"only the tool {submit!r}" if submit else "no tools"
    problem = f"in its repair turn, which offers {offered}, it called the tool {others[0]!r}"
    raise StructuredResultError(
        f"the model's structured result for {spec.name!r} was invalid twice: {problem}",
        schema_name=spec.name,
        validation_errors=[problem],
    )


def cut_off_before_answering(spec: ResultSchema | None) -> OutputLimitError:
    """The error of a model turn the output token limit stopped before it answered.

    "Before it answered": no tool call and no text but whitespace (a reasoning model
    may spend the whole limit thinking), or, for a structured agent, no valid result
    (a JSON answer cut short; with the tool strategy, no call of the submit tool).
    Another attempt under the same limit would most likely be cut off again, so the
    run fails (the spec's OutputLimitError: generation limits stopped the agent
    before completion) rather than repairing. Text cut off after it began is an
    answer: the run completes with stop reason ``max_tokens``.
    """
    wanted = "an answer (no text and no tool call)" if spec is None else f"a valid result for the schema {spec.name!r}"
    return OutputLimitError(
        f"the model stopped at its output token limit (stop reason max_tokens) before it gave {wanted}; "
        "raise the output limit in the request settings (max_tokens, or the provider's name for it)"
    )


def repair_instruction(spec: ResultSchema, strategy: str, problems: list[str]) -> str:
    """What the model is told after an invalid or missing result: one request, in the active strategy's terms.

    The tool strategy takes a result only through its submit tool, whether the
    answer was text or an invalid submission, so its model is never asked for a
    bare JSON answer (which would fail the run); the provider strategy reads the
    answer's text as the JSON object.
    """
    said = (
        f"Your previous answer did not match the required result schema {spec.name!r}: "
        + "; ".join(problems[:5])
        + ". "
    )
    if strategy == "tool":
        return (
            said
            + f"Call the tool {spec.tool_name()!r} with the corrected result object as its input; "
            + "do not answer in text."
        )
    return said + "Answer again with only a corrected JSON object."


def with_output(result: RunResult, spec: ResultSchema | None) -> RunResult:
    """``result`` whose ``output`` is that of its own structured result.

    An after_invocation replacement built with ``dataclasses.replace`` keeps the
    original's ``output_value``, so ``output`` would give the value the callback
    replaced (RunResult#output: "Uses the structured value when present").
    """
    structured = result.structured_result
    output = None if structured is None or spec is None else spec.output(structured.value)
    if output is result.output_value:
        return result
    return dataclasses.replace(result, output_value=output)


def submit_description(name: str) -> str:
    """The submit tool's default description ("Submit the final result result." for a schema named result)."""
    return "Submit the final result." if name == "result" else f"Submit the final {name} result."


__all__ = [
    "NOT_RUN_AT_FINISH",
    "RESULT_ACCEPTED",
    "answers_to_final_calls",
    "cut_off_before_answering",
    "refuse_tool_work_in_repair",
    "repair_instruction",
    "submit_description",
    "with_output",
]
