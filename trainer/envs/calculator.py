"""A tool-use environment: arithmetic questions with a calculator tool (`calculator`).

One reply per turn, in one of two forms:

    <calculator>EXPRESSION</calculator>   a tool call; the next observation is <result>VALUE</result>,
                                          or <error>WHY</error> when the evaluator refuses the expression
    <answer>NUMBER</answer>               the final answer: reward 1 and success when it is within 1e-6
                                          of the question's value, else reward 0; the episode ends

Anything else (or an answer that is not a number) breaks the format: nothing happens, the
observation says why, and the env manager adds its format_penalty.

Questions (env_config: num_operands, max_operand, operators): num_operands integers drawn from
[1, max_operand] joined by operators drawn from `operators` (default "+-*"), e.g. "37*12+5".

The calculator is `evaluate`, our own evaluator, never Python's eval: it parses with
ast.parse(mode="eval") and walks the tree, accepting only number literals (integers and decimals,
read from their source text), binary + - * /, unary + -, and parentheses, in exact rational
arithmetic (fractions.Fraction). Names, calls, attributes, subscripts, **, //, %, comparisons and
every other node are refused, as are expressions longer than MAX_CHARS characters, division by zero,
and any intermediate value whose magnitude exceeds MAX_MAGNITUDE.
"""

from __future__ import annotations

import ast
import random
import re
from fractions import Fraction

from trainer.config.registries import ENV_CONFIG_BOUNDS, check_env_config
from trainer.envs.actions import ANSWER_TAG, tagged
from trainer.envs.base import Env, StepResult

MAX_CHARS = 200
MAX_MAGNITUDE = 10**18
ANSWER_TOLERANCE = Fraction(1, 10**6)
CALCULATOR_TAG = re.compile(r"<calculator>(.*?)</calculator>", re.DOTALL)
_BINARY = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b,
           ast.Div: lambda a, b: a / b}
_UNARY = {ast.UAdd: lambda a: a, ast.USub: lambda a: -a}
OPERATORS = "+-*/"
BOUNDS = ENV_CONFIG_BOUNDS["calculator"]  # defaults and ranges, declared once


class CalculatorError(ValueError):
    """An expression the calculator refuses; the message says why."""


def evaluate(expression: str) -> Fraction:
    """The exact value of an arithmetic expression (module docstring), or CalculatorError."""
    if len(expression) > MAX_CHARS:
        raise CalculatorError(f"expression longer than {MAX_CHARS} characters")
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        raise CalculatorError("not an arithmetic expression") from None
    return _value(tree.body, expression.strip())


def _value(node: ast.AST, source: str) -> Fraction:
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        value = Fraction(ast.get_source_segment(source, node) or "")  # "0.1" is exactly 1/10
    elif isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _value(node.left, source), _value(node.right, source)
        if isinstance(node.op, ast.Div) and right == 0:
            raise CalculatorError("division by zero")
        value = _BINARY[type(node.op)](left, right)
    elif isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        value = _UNARY[type(node.op)](_value(node.operand, source))
    else:
        what = type(node.op if isinstance(node, ast.BinOp | ast.UnaryOp) else node).__name__
        raise CalculatorError(f"{what} is not allowed; only numbers, + - * / and parentheses")
    if abs(value) > MAX_MAGNITUDE:
        raise CalculatorError(f"a value exceeds {MAX_MAGNITUDE:.0e} in magnitude")
    return value


def format_number(value: Fraction) -> str:
    """An integer as is; otherwise a decimal rounded to 6 places, trailing zeros removed."""
    if value.denominator == 1:
        return str(value.numerator)
    return f"{float(value):.6f}".rstrip("0").rstrip(".")


def parse_number(text: str) -> Fraction | None:
    try:
        return Fraction(text.strip())
    except (ValueError, ZeroDivisionError):
        return None


class Calculator(Env):
    """Module docstring."""

    def __init__(self, num_operands: int = BOUNDS["num_operands"].default,
                 max_operand: int = BOUNDS["max_operand"].default, operators: str = "+-*") -> None:
        check_env_config("calculator", num_operands=num_operands, max_operand=max_operand)
        if not operators or set(operators) - set(OPERATORS):
            raise ValueError(f"env_config.operators: {operators!r}; valid: a non-empty subset of "
                             f"{OPERATORS!r}")
        self.num_operands, self.max_operand, self.operators = num_operands, max_operand, operators
        self.instruction = ("Answer the arithmetic question. To use the calculator reply "
                            "<calculator>EXPRESSION</calculator>; it answers <result>VALUE</result>. "
                            "Finish with <answer>NUMBER</answer>.")
        self.done = True

    def reset(self, seed: int) -> str:
        rng = random.Random(f"calculator:{seed}")
        parts = [str(rng.randint(1, self.max_operand))]
        for _ in range(self.num_operands - 1):
            parts += [rng.choice(self.operators), str(rng.randint(1, self.max_operand))]
        self.question = "".join(parts)
        self.value = evaluate(self.question)
        self.transcript: list[str] = []
        self.done = False
        return f"Question: {self.question}"

    def step(self, reply: str) -> StepResult:
        if self.done:
            raise RuntimeError("Calculator.step after the episode ended; call reset(seed) first")
        call = tagged(reply, CALCULATOR_TAG)
        answer = tagged(reply, ANSWER_TAG)
        if call is not None and (answer is None or reply.index("<calculator>") < reply.index("<answer>")):
            try:
                observation = f"<result>{format_number(evaluate(call))}</result>"
                error = False
            except CalculatorError as exc:
                observation, error = f"<error>{exc}</error>", True
            self.transcript.append(f"calculator({call}) -> {observation}")
            info = {"format_ok": True, "success": False, "action": "calculator", "tool_error": error}
            return StepResult(observation, 0.0, False, info)
        number = parse_number(answer) if answer is not None else None
        if number is None:
            why = "the answer is not a number" if answer is not None else "no <calculator> call or <answer>"
            return StepResult(f"<error>{why}</error>", 0.0, False,
                              {"format_ok": False, "success": False, "action": None})
        success = abs(number - self.value) <= ANSWER_TOLERANCE
        self.transcript.append(f"answer {answer} ({'correct' if success else 'wrong'})")
        self.done = True
        observation = "correct" if success else f"wrong: {self.question} = {format_number(self.value)}"
        return StepResult(observation, 1.0 if success else 0.0, True,
                          {"format_ok": True, "success": success, "action": "answer"})

    def render(self) -> str:
        return "\n".join([f"Question: {self.question}", *self.transcript])
