"""The `calculator` tool: arithmetic on numbers, evaluated from Python's syntax tree, never with eval.

Accepted: integers and decimals, + - * / // % **, unary + and -, parentheses, and the functions abs,
round, min, max, sqrt, floor and ceil. Anything else (names, attributes, strings, comparisons, calls of
other functions) is an error the model reads, as is division by zero. Work is bounded before it is
done: at most 300 characters and 100 syntax nodes, exponents up to 1000, and no intermediate result
beyond 10**300, so no expression can keep the loop busy. Thousands separators ("1,234") are read as
numbers and "^" is refused with a hint (it is XOR in Python, a power in most calculators).
Standard library only: this file is inlined into the generated training loop.
"""

import ast
import math
import re

_CALC_MAX_CHARS = 300
_CALC_MAX_NODES = 100
_CALC_MAX_EXPONENT = 1000
_CALC_LIMIT = 10**300  # the largest magnitude of any intermediate result
_CALC_THOUSANDS_RE = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")
_CALC_FUNCTIONS = {
    "abs": abs,
    "round": round,
    "min": min,
    "max": max,
    "sqrt": math.sqrt,
    "floor": math.floor,
    "ceil": math.ceil,
}
_CALC_BINARY = {
    ast.Add: lambda a, b: a + b,
    ast.Sub: lambda a, b: a - b,
    ast.Mult: lambda a, b: a * b,
    ast.Div: lambda a, b: a / b,
    ast.FloorDiv: lambda a, b: a // b,
    ast.Mod: lambda a, b: a % b,
}


class CalculatorError(ValueError):
    """An expression the calculator does not take, or cannot compute; the message says why."""


def _calc_number(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise CalculatorError("only numbers can be computed")
    if isinstance(value, float) and not math.isfinite(value):
        raise CalculatorError("the result is not a finite number")
    if abs(value) > _CALC_LIMIT:
        raise CalculatorError("a number in the computation is larger than 10**300")
    return value


def _calc_power(base: float, exponent: float) -> float:
    if abs(exponent) > _CALC_MAX_EXPONENT:
        raise CalculatorError(f"exponents are limited to {_CALC_MAX_EXPONENT}")
    if base != 0 and abs(base) != 1 and exponent > 0 and exponent * math.log10(abs(base)) > 300:
        raise CalculatorError("the result would be larger than 10**300")
    if base == 0 and exponent < 0:
        raise CalculatorError("zero cannot be raised to a negative power")
    result = base**exponent
    if isinstance(result, complex):
        raise CalculatorError("the result is not a real number")
    return result


def _calc_eval(node: ast.AST) -> float:
    if isinstance(node, ast.Expression):
        return _calc_eval(node.body)
    if isinstance(node, ast.Constant):
        return _calc_number(node.value)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.UAdd | ast.USub):
        value = _calc_eval(node.operand)
        return value if isinstance(node.op, ast.UAdd) else -value
    if isinstance(node, ast.BinOp):
        left, right = _calc_eval(node.left), _calc_eval(node.right)
        if isinstance(node.op, ast.Pow):
            return _calc_number(_calc_power(left, right))
        if isinstance(node.op, ast.BitXor):
            raise CalculatorError("^ is not a power here: write ** (2**10)")
        operation = _CALC_BINARY.get(type(node.op))
        if operation is None:
            raise CalculatorError(f"the operator {type(node.op).__name__} is not arithmetic")
        try:
            return _calc_number(operation(left, right))
        except ZeroDivisionError:
            raise CalculatorError("division by zero") from None
        except OverflowError:
            raise CalculatorError("the result is too large") from None
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and not node.keywords:
        function = _CALC_FUNCTIONS.get(node.func.id)
        if function is None:
            raise CalculatorError(f"unknown function {node.func.id!r}; known: {', '.join(_CALC_FUNCTIONS)}")
        values = [_calc_eval(arg) for arg in node.args]
        try:
            return _calc_number(function(*values))
        except (TypeError, ValueError, OverflowError) as exc:
            raise CalculatorError(f"{node.func.id}: {exc}") from None
    if isinstance(node, ast.Name):
        raise CalculatorError(f"unknown name {node.id!r}: only numbers and {', '.join(_CALC_FUNCTIONS)}")
    raise CalculatorError(f"{type(node).__name__} is not arithmetic")


def calculate(expression: str) -> str:
    """The value of an arithmetic expression as text ("391", "0.5"), or "error: ..." saying why not."""
    text = _CALC_THOUSANDS_RE.sub("", expression.strip())
    if not text:
        return "error: the expression is empty"
    if len(text) > _CALC_MAX_CHARS:
        return f"error: the expression is longer than {_CALC_MAX_CHARS} characters"
    try:
        tree = ast.parse(text, mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return "error: not an arithmetic expression"
    if sum(1 for _ in ast.walk(tree)) > _CALC_MAX_NODES:
        return f"error: the expression has more than {_CALC_MAX_NODES} parts"
    try:
        value = _calc_eval(tree)
    except CalculatorError as exc:
        return f"error: {exc}"
    except RecursionError:
        return "error: the expression is nested too deeply"
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    return repr(round(value, 10)) if isinstance(value, float) else str(value)
