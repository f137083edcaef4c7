"""Op cases for the core families: elementwise, comparison, copy, in-place, reduction, linalg,
creation and random. Shapes include broadcasting and non-contiguous (nc) views."""
import math

from optable import Case, I, In, K, M, P, R, U


def elementwise_cases():
    c = []
    # Unary ops spelled the same in both libraries; logs and roots get positive inputs.
    positive = {"log", "log1p", "sqrt", "rsqrt", "reciprocal"}
    unary = "neg abs sign square exp log log1p sqrt rsqrt reciprocal sin cos tanh sigmoid relu erf"
    for name in unary.split():
        spec = P if name in positive else R
        c.append(Case(name, [spec(3, 5)], lambda m, x, n=name: getattr(m, n)(x)))
        method = lambda m, x, n=name: getattr(x, n)()  # noqa: E731
        c.append(Case(name, [spec(4, 3, nc=True)], method, label="nc_method"))
    c += [
        Case("silu", [R(3, 5)], lambda m, x: m.nn.functional.silu(x)),
        Case("silu", [R(2, 6, nc=True)], lambda m, x: m.nn.functional.silu(x * 3), label="nc"),
        Case("gelu", [R(3, 5)], lambda m, x: m.nn.functional.gelu(x)),
        Case(
            "gelu",
            [R(4, 3, nc=True)],
            lambda m, x: m.nn.functional.gelu(x, approximate="tanh"),
            label="tanh_nc",
        ),
        Case("softplus", [R(3, 5)], lambda m, x: m.nn.functional.softplus(x)),
        Case(
            "softplus",
            [R(3, 5)],
            lambda m, x: m.nn.functional.softplus(x * 10, beta=2.0, threshold=5.0),
            label="beta_threshold",
        ),
        Case("clamp", [R(3, 5)], lambda m, x: m.clamp(x, min=-0.5, max=1.0)),
        Case("clamp", [R(4, 3, nc=True)], lambda m, x: x.clamp(min=0.25), label="min_only_nc"),
        Case(
            "add", [R(3, 4), R(4)], lambda m, x, y: m.add(x, y, alpha=0.5), label="broadcast_alpha"
        ),
        Case("add", [R(2, 3, 4, nc=True), R(3, 1)], lambda m, x, y: x + y, label="nc_broadcast"),
        Case("add", [R(3, 4)], lambda m, x: 2.5 + x, label="reflected_scalar"),
        Case(
            "add",
            [In((3, 4), "int"), In((4,), "int")],
            lambda m, x, y: x + y,
            label="int64",
            dtypes=("int64",),
            grad=False,
        ),
        Case(
            "sub", [R(3, 4), R(3, 1)], lambda m, x, y: m.sub(x, y, alpha=2), label="broadcast_alpha"
        ),
        Case("sub", [R(3, 4)], lambda m, x: 1 - x, label="reflected_scalar"),
        Case("mul", [R(2, 1, 4), R(3, 1)], lambda m, x, y: x * y, label="broadcast_both"),
        Case("mul", [R(4, 3, nc=True), R(4, 3)], lambda m, x, y: m.mul(x, y), label="nc"),
        Case(
            "mul",
            [In((3, 4), "int")],
            lambda m, x: x * 3,
            label="int_scalar",
            dtypes=("int64",),
            grad=False,
        ),
        Case("div", [R(3, 4), P(4)], lambda m, x, y: x / y, label="broadcast"),
        Case("div", [P(3, 4)], lambda m, x: 2 / x, label="reflected_scalar"),
        Case(
            "div",
            [In((3, 4), "int")],
            lambda m, x: x / 4,
            label="int_true_division",
            dtypes=("int64",),
            grad=False,
        ),
        Case("pow", [P(3, 4), R(4)], lambda m, x, y: m.pow(x, y), label="tensor_exponent"),
        Case("pow", [R(3, 4)], lambda m, x: x**3, label="scalar_exponent"),
        Case("pow", [R(3, 4)], lambda m, x: 2**x, label="reflected"),
        Case("maximum", [R(3, 4), R(4)], lambda m, x, y: m.maximum(x, y)),
        Case("minimum", [R(3, 4), R(3, 1)], lambda m, x, y: m.minimum(x, y)),
        Case(
            "lerp",
            [R(3, 4), R(3, 4), U(4)],
            lambda m, x, y, w: m.lerp(x, y, w),
            label="tensor_weight",
        ),
        Case("lerp", [R(3, 4), R(4)], lambda m, x, y: m.lerp(x, y, 0.3), label="scalar_weight"),
        Case("where", [M(3, 4), R(3, 4), R(4)], lambda m, c, x, y: m.where(c, x, y)),
        Case("where", [M(3, 4), R(3, 4)], lambda m, c, x: m.where(c, x, 0.5), label="scalar_other"),
    ]
    return c


def comparison_cases():
    c = []
    for name, op in [
        ("eq", "__eq__"),
        ("ne", "__ne__"),
        ("lt", "__lt__"),
        ("le", "__le__"),
        ("gt", "__gt__"),
        ("ge", "__ge__"),
    ]:
        c.append(
            Case(name, [R(3, 4), R(4)], lambda m, x, y, n=name: getattr(m, n)(x, y), grad=False)
        )
        c.append(
            Case(
                name,
                [R(3, 4)],
                lambda m, x, o=op: getattr(x, o)(0.25),
                label="scalar_operator",
                grad=False,
            )
        )
    c.append(
        Case(
            "eq",
            [In((3, 4), "int"), In((3, 4), "int")],
            lambda m, x, y: x == y,
            label="int",
            dtypes=("int64",),
            grad=False,
        )
    )
    for name in ("isnan", "isinf", "isfinite"):
        c.append(
            Case(name, [In((3, 4), "special")], lambda m, x, n=name: getattr(m, n)(x), grad=False)
        )
    for name in ("logical_and", "logical_or", "logical_xor"):
        c.append(
            Case(
                name,
                [M(3, 4), M(4)],
                lambda m, a, b, n=name: getattr(m, n)(a, b),
                dtypes=(),
                grad=False,
            )
        )
    # & | ^ ~ are bitwise on integers (they were logical: 6 & 3 gave True), logical on bools.
    ints = dict(dtypes=(), grad=False)
    for name, operator in (("bitwise_and", "__and__"), ("bitwise_or", "__or__"),
                           ("bitwise_xor", "__xor__")):
        c += [
            Case(name, [In((3, 4), "int"), In((4,), "int")],
                 lambda m, a, b, n=name: getattr(m, n)(a, b), label="int", **ints),
            Case(name, [In((3, 4), "int")], lambda m, a, o=operator: getattr(a, o)(6),
                 label="operator_scalar", **ints),
            Case(name, [M(3, 4), M(3, 4)], lambda m, a, b, o=operator: getattr(a, o)(b),
                 label="operator_bool", **ints),
        ]
    c += [
        Case("bitwise_not", [In((3, 4), "int")], lambda m, a: ~a, label="int", **ints),
        Case("bitwise_not", [M(3, 4)], lambda m, a: m.bitwise_not(a), label="bool", **ints),
    ]
    c += [
        Case("logical_not", [M(3, 4)], lambda m, a: m.logical_not(a), dtypes=(), grad=False),
        Case(
            "allclose", [R(3, 4)], lambda m, x: m.allclose(x, x + 1e-9), grad=False, label="close"
        ),
        Case(
            "allclose",
            [R(3, 4), R(3, 4)],
            lambda m, x, y: m.allclose(x, y),
            grad=False,
            label="far",
        ),
    ]
    return c


def copy_and_inplace_cases():
    return [
        Case(
            "cast", [R(3, 4)], lambda m, x: m.cast(x, m.float64), ref=lambda t, x: x.to(t.float64)
        ),
        Case("cast", [R(3, 4)], lambda m, x: x.to(m.int32), label="to_int", grad=False),
        Case("clone", [R(4, 3, nc=True)], lambda m, x: m.clone(x)),
        Case("contiguous", [R(4, 3, nc=True)], lambda m, x: x.contiguous()),
        Case("add_", [R(3, 4), R(4)], lambda m, x, y: (x * 1).add_(y, alpha=2)),
        Case("sub_", [R(3, 4), R(3, 1)], lambda m, x, y: (x * 1).sub_(y)),
        Case("mul_", [R(3, 4), R(4)], lambda m, x, y: (x * 1).mul_(y)),
        Case("div_", [R(3, 4), P(3, 4)], lambda m, x, y: (x * 1).div_(y)),
        Case("clamp_", [R(3, 4)], lambda m, x: (x * 1).clamp_(min=-0.5, max=1.0)),
        Case("copy_", [R(3, 4), R(4)], lambda m, x, y: (x * 1).copy_(y), label="broadcast"),
        Case("masked_fill_", [R(3, 4), M(3, 4)], lambda m, x, k: (x * 1).masked_fill_(k, 0.5)),
        Case("fill_", [K(3, 4)], lambda m, x: x.clone().fill_(2.5), grad=False),
        Case("zero_", [K(3, 4)], lambda m, x: x.clone().zero_(), grad=False),
    ]


def reduction_cases():
    c = [
        Case("sum", [R(3, 4, 5)], lambda m, x: m.sum(x), label="all"),
        Case(
            "sum", [R(3, 4, 5)], lambda m, x: x.sum(dim=(0, 2), keepdim=True), label="dims_keepdim"
        ),
        Case(
            "sum", [R(4, 3, nc=True)], lambda m, x: m.sum(x, 1, dtype=m.float64), label="nc_dtype"
        ),
        Case(
            "sum",
            [In((3, 4), "int")],
            lambda m, x: x.sum(1),
            label="int",
            dtypes=("int64",),
            grad=False,
        ),
        Case("mean", [R(3, 4, 5)], lambda m, x: m.mean(x, dim=(1,))),
        Case("mean", [R(4, 3, nc=True)], lambda m, x: x.mean(), label="all_nc"),
        Case("prod", [P(3, 4)], lambda m, x: m.prod(x, 1)),
        Case("prod", [P(3, 4)], lambda m, x: m.prod(x), label="all"),
        Case("amax", [R(3, 4, 5)], lambda m, x: m.amax(x, dim=(0, 2))),
        Case("amin", [R(3, 4)], lambda m, x: m.amin(x, dim=1, keepdim=True)),
        Case("max", [R(3, 4)], lambda m, x: m.max(x), label="all"),
        Case("max", [R(3, 5)], lambda m, x: m.max(x, dim=1), label="dim"),
        Case("min", [R(3, 4)], lambda m, x: m.min(x), label="all"),
        Case("min", [R(4, 3, nc=True)], lambda m, x: x.min(0, keepdim=True), label="dim_nc"),
        Case("argmax", [R(3, 5)], lambda m, x: m.argmax(x, dim=1), grad=False),
        Case("argmax", [R(3, 5)], lambda m, x: x.argmax(), label="flat", grad=False),
        Case("sort", [R(3, 5)], lambda m, x: m.sort(x).values),
        Case("sort", [R(4, 3, nc=True)], lambda m, x: x.sort(0, descending=True)[1],
             label="indices_nc", grad=False),
        Case("argsort", [R(3, 5)], lambda m, x: m.argsort(x, dim=-1, descending=True), grad=False),
        Case("topk", [R(3, 6)], lambda m, x: m.topk(x, 2).values),
        Case("topk", [R(2, 5, 3)], lambda m, x: x.topk(3, dim=1, largest=False).indices,
             label="smallest_indices", grad=False),
        Case("argmin", [R(3, 5)], lambda m, x: m.argmin(x, 0, keepdim=True), grad=False),
        Case("var", [R(3, 6)], lambda m, x: m.var(x, 1)),
        Case(
            "var",
            [R(3, 6)],
            lambda m, x: m.var(x, dim=0, unbiased=False, keepdim=True),
            label="biased",
        ),
        Case("std", [R(4, 5)], lambda m, x: m.std(x, 1)),
        Case("std", [R(4, 5)], lambda m, x: x.std(), label="all"),
        Case("norm", [R(3, 4)], lambda m, x: m.norm(x)),
        Case("norm", [R(3, 4)], lambda m, x: m.norm(x, p=1, dim=1, keepdim=True), label="p1_dim"),
        Case("norm", [R(3, 4)], lambda m, x: m.norm(x, p=math.inf, dim=1), label="inf"),
        Case("logsumexp", [R(3, 5)], lambda m, x: m.logsumexp(x, 1)),
        Case(
            "logsumexp",
            [R(4, 3, nc=True)],
            lambda m, x: m.logsumexp(x * 20, dim=0, keepdim=True),
            label="large_nc",
        ),
        Case("cumsum", [R(3, 5)], lambda m, x: m.cumsum(x, 1)),
        Case(
            "cumsum",
            [In((3, 5), "int")],
            lambda m, x: x.cumsum(0),
            label="int",
            dtypes=("int64",),
            grad=False,
        ),
        Case("all", [M(3, 4)], lambda m, k: m.all(k), dtypes=(), grad=False),
        Case("all", [M(3, 4)], lambda m, k: m.all(k, 1), label="dim", dtypes=(), grad=False),
        Case("any", [M(3, 4)], lambda m, k: m.any(k, dim=0), dtypes=(), grad=False),
        Case("sum_to", [R(2, 3, 4)], lambda m, x: x.sum_to_size(3, 1)),
    ]
    return c


def linalg_cases():
    return [
        Case("matmul", [R(3, 4), R(4, 5)], lambda m, a, b: a @ b, label="2d"),
        Case(
            "matmul",
            [R(2, 3, 4), R(4, 5, nc=True)],
            lambda m, a, b: m.matmul(a, b),
            label="batched_broadcast_nc",
        ),
        Case("matmul", [R(4), R(2, 4, 3)], lambda m, a, b: m.matmul(a, b), label="vector_lhs"),
        Case("mm", [R(3, 4, nc=True), R(4, 2)], lambda m, a, b: m.mm(a, b)),
        Case("bmm", [R(2, 3, 4), R(2, 4, 5)], lambda m, a, b: a.bmm(b)),
        Case(
            "addmm",
            [R(5), R(3, 4), R(4, 5)],
            lambda m, c, a, b: m.addmm(c, a, b, beta=0.5, alpha=2.0),
        ),
        Case(
            "baddbmm",
            [R(2, 3, 5), R(2, 3, 4), R(2, 4, 5)],
            lambda m, c, a, b: m.baddbmm(c, a, b, beta=0.5, alpha=1.5),
        ),
        Case(
            "linear",
            [R(2, 3, 4), R(5, 4), R(5)],
            lambda m, x, w, b: m.nn.functional.linear(x, w, b),
        ),
        Case(
            "linear",
            [R(3, 4), R(5, 4, nc=True)],
            lambda m, x, w: m.nn.functional.linear(x, w),
            label="no_bias_nc",
        ),
        Case("outer", [R(3), R(4, nc=True)], lambda m, a, b: m.outer(a, b)),
    ]


def creation_cases():
    meta = dict(dtypes=(), grad=False, check="meta")
    once = dict(dtypes=(), grad=False)
    return [
        Case("zeros", [], lambda m: m.zeros(2, 3, dtype=m.float64), **once),
        Case("ones", [], lambda m: m.ones((2, 3), dtype=m.int32), **once),
        Case("full", [], lambda m: m.full((2, 3), 1.5), **once),
        Case("full", [], lambda m: m.full((2,), 7), label="int_value", **once),
        Case("empty", [], lambda m: m.empty(4, 2), **meta),
        Case("empty_strided", [], lambda m: m.empty_strided((2, 3), (1, 2)), **meta),
        Case("empty_like", [K(3, 2)], lambda m, x: m.empty_like(x), grad=False, check="meta"),
        Case("zeros_like", [K(3, 2)], lambda m, x: m.zeros_like(x), grad=False),
        Case("ones_like", [K(3, 2)], lambda m, x: m.ones_like(x, dtype=m.float64), grad=False),
        Case("full_like", [K(3, 2)], lambda m, x: m.full_like(x, -2.0), grad=False),
        Case("scalar_tensor", [], lambda m: m.scalar_tensor(3.5), **once),
        Case("tensor", [], lambda m: m.tensor([[1.0, 2.0], [3.0, 4.5]]), **once),
        Case("tensor", [], lambda m: m.tensor([1, 2, 3]), label="ints", **once),
        Case("tensor", [], lambda m: m.tensor([True, False]), label="bools", **once),
        Case("arange", [], lambda m: m.arange(5), **once),
        Case("arange", [], lambda m: m.arange(1.0, 2.0, 0.25), label="float_step", **once),
        Case("linspace", [], lambda m: m.linspace(-1, 1, 7), **once),
        Case("eye", [], lambda m: m.eye(3, 4), **once),
    ]


def random_cases():
    """Tessera's Philox streams differ from torch's generator, so random ops are compared by
    distribution (mean and std of many draws) or, for permutations, by their sorted values."""
    n = 40000
    stats = dict(grad=False, check="stats", bf16=False)
    return [
        Case("rand", [], lambda m: m.rand(n), dtypes=(), **stats),
        Case("randn", [], lambda m: m.randn(n, dtype=m.float64), dtypes=(), **stats),
        Case("randint", [], lambda m: m.randint(0, 10, (n,)), dtypes=(), **stats),
        Case("randperm", [], lambda m: m.randperm(50), dtypes=(), grad=False, check="sorted"),
        Case("rand_like", [In((n,), "zero")], lambda m, x: m.rand_like(x), **stats),
        Case("randn_like", [In((n,), "zero")], lambda m, x: m.randn_like(x), **stats),
        Case("normal_", [In((n,), "zero")], lambda m, x: x.clone().normal_(1.0, 2.0), **stats),
        Case("uniform_", [In((n,), "zero")], lambda m, x: x.clone().uniform_(-1.0, 3.0), **stats),
        Case(
            "bernoulli", [In((n,), "zero")], lambda m, x: m.bernoulli(m.full_like(x, 0.3)), **stats
        ),
        Case(
            "multinomial",
            [],
            lambda m: m.multinomial(m.tensor([1.0, 2.0, 0.0, 3.0, 4.0]), n, replacement=True),
            dtypes=(),
            **stats
        ),
        Case(
            "multinomial",
            [],
            lambda m: m.multinomial(m.ones(2, 50), 50),  # each row a permutation
            dtypes=(),
            grad=False,
            check="sorted",
            label="without_replacement",
        ),
        Case(
            "dropout",
            [In((n,), "zero")],
            lambda m, x: m.nn.functional.dropout(m.ones_like(x), 0.3),
            label="train_stats",
            **stats
        ),
    ]


CASES = (
    elementwise_cases()
    + comparison_cases()
    + copy_and_inplace_cases()
    + reduction_cases()
    + linalg_cases()
    + creation_cases()
    + random_cases()
)
