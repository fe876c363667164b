#pragma once
/// \file linalg.h
/// Matrix products and einsum, as PyTorch 1.13's: mm, bmm, mv, dot, outer, the add* family with
/// beta and alpha, tensordot, kron, trace, diagonal, diag, diag_embed, cross, cdist and einsum.
/// Each is a composite of kiln's ops (matmul, permute, reshape, slice, pad, sum, ...), so gradients,
/// fusion, compile() and CUDA come with them. The products run on the GEMM: einsum lowers each
/// pairwise contraction onto one (batched) matmul, never a broadcast product summed afterwards.
/// Shapes are checked as strictly as PyTorch's (mm takes 2-d operands only, bmm 3-d ones of equal
/// batch, ...); bad input is a kiln::Error naming the op, the shapes and the caller's line.

#include <optional>
#include <string>
#include <vector>

#include "kiln/tensor.h"

namespace kiln {

/// torch.mm: the product of two matrices, [n, m] x [m, p] -> [n, p] (no broadcasting, no 1-d).
Tensor mm(const Tensor& a, const Tensor& b, Loc loc = Loc::current());
/// torch.bmm: batched matrix product, [B, n, m] x [B, m, p] -> [B, n, p] (equal batch, no broadcasting).
Tensor bmm(const Tensor& a, const Tensor& b, Loc loc = Loc::current());
/// torch.mv: matrix times vector, [n, m] x [m] -> [n].
Tensor mv(const Tensor& mat, const Tensor& vec, Loc loc = Loc::current());
/// torch.dot: the inner product of two 1-d tensors of equal length (a 0-d result).
Tensor dot(const Tensor& a, const Tensor& b, Loc loc = Loc::current());
/// torch.vdot: dot of the conjugate of a with b; kiln's tensors are real, so the same as dot.
Tensor vdot(const Tensor& a, const Tensor& b, Loc loc = Loc::current());
/// torch.outer: the outer product of two 1-d tensors, [n] x [m] -> [n, m].
Tensor outer(const Tensor& a, const Tensor& b, Loc loc = Loc::current());
/// torch.ger: the old name of outer.
Tensor ger(const Tensor& a, const Tensor& b, Loc loc = Loc::current());

/// torch.addmm: beta * input + alpha * mm(m1, m2), input broadcast to [n, p]. As PyTorch's, beta = 0
/// ignores input's values (NaN and inf in it do not propagate; its gradient is 0) but not its shape.
Tensor addmm(const Tensor& input, const Tensor& m1, const Tensor& m2, Scalar beta = 1, Scalar alpha = 1,
             Loc loc = Loc::current());
/// torch.addmv: beta * input + alpha * mv(mat, vec), input broadcast to [n]; beta = 0 as addmm.
Tensor addmv(const Tensor& input, const Tensor& mat, const Tensor& vec, Scalar beta = 1, Scalar alpha = 1,
             Loc loc = Loc::current());
/// torch.addr: beta * input + alpha * outer(v1, v2), input broadcast to [n, m]; beta = 0 as addmm.
Tensor addr(const Tensor& input, const Tensor& v1, const Tensor& v2, Scalar beta = 1, Scalar alpha = 1,
            Loc loc = Loc::current());
/// torch.baddbmm: beta * input + alpha * bmm(b1, b2), input broadcast to [B, n, p]; beta = 0 as addmm.
Tensor baddbmm(const Tensor& input, const Tensor& b1, const Tensor& b2, Scalar beta = 1, Scalar alpha = 1,
               Loc loc = Loc::current());
/// torch.addbmm: beta * input + alpha * the sum over the batch of bmm(b1, b2), input broadcast to
/// [n, p]; one GEMM with the batch folded into the inner dim. beta = 0 as addmm.
Tensor addbmm(const Tensor& input, const Tensor& b1, const Tensor& b2, Scalar beta = 1, Scalar alpha = 1,
              Loc loc = Loc::current());

/// torch.tensordot with an int: contracts the last `dims` dims of a with the first `dims` of b.
Tensor tensordot(const Tensor& a, const Tensor& b, int64_t dims = 2, Loc loc = Loc::current());
/// torch.tensordot with two lists: contracts a's dims_a[i] with b's dims_b[i] (negative dims count
/// from the end). As PyTorch's, a contracted dim of extent 1 on one side is summed on the other.
Tensor tensordot(const Tensor& a, const Tensor& b, IntList dims_a, IntList dims_b, Loc loc = Loc::current());
/// torch.kron: the Kronecker product; the lower-rank operand gets leading dims of extent 1, and the
/// result's extent along dim d is a.size(d) * b.size(d).
Tensor kron(const Tensor& a, const Tensor& b, Loc loc = Loc::current());

/// torch.trace: the sum of a matrix's main diagonal (2-d input only; integers sum to i64).
Tensor trace(const Tensor& x, Loc loc = Loc::current());
/// torch.diagonal: the diagonal of the (dim1, dim2) planes, `offset` above (>0) or below (<0) the main
/// one, as a new last dim; those two dims are removed. A strided slice of the flattened plane.
Tensor diagonal(const Tensor& x, int64_t offset = 0, int64_t dim1 = 0, int64_t dim2 = 1, Loc loc = Loc::current());
/// torch.diag: a 1-d x gives the square matrix with x on diagonal `offset`; a 2-d x its diagonal.
Tensor diag(const Tensor& x, int64_t offset = 0, Loc loc = Loc::current());
/// torch.diag_embed: x's last dim placed on diagonal `offset` of new (dim1, dim2) planes (dims of the
/// result, rank + 1), zeros elsewhere.
Tensor diag_embed(const Tensor& x, int64_t offset = 0, int64_t dim1 = -2, int64_t dim2 = -1, Loc loc = Loc::current());

/// torch.cross: linalg::cross along `dim`; without one, along the first dim of a's of extent 3
/// (torch.cross's deprecated default).
Tensor cross(const Tensor& a, const Tensor& b, std::optional<int64_t> dim = std::nullopt, Loc loc = Loc::current());

/// torch.cdist: the p-norm distances between the rows of x1 [..., P, M] and of x2 [..., R, M], as
/// [..., P, R] (batch dims broadcast). p = 0 counts differing coordinates, inf takes the largest;
/// p >= 0. The gradient is PyTorch's: 0 where a distance is 0 (and, p < 1, where a coordinate
/// differs by 0); for p = inf kiln splits it among tied coordinates, where PyTorch gives each one all.
/// Computed directly (PyTorch switches p = 2 to a matrix-product form above 25 rows, whose values
/// differ by rounding and which gives 1e-15 rather than 0 at distance 0).
Tensor cdist(const Tensor& x1, const Tensor& x2, double p = 2, Loc loc = Loc::current());

/// torch.pdist: the p-norm distances between the rows of x [N, M], i < j, in row-major order of (i, j):
/// [N (N - 1) / 2] (kiln::norm's orders, p >= 0, and gradients: 0 at a distance of 0, as PyTorch's).
Tensor pdist(const Tensor& x, double p = 2, Loc loc = Loc::current());
/// torch.matrix_power: the square matrices of x [..., n, n] to the power k >= 0 by repeated squaring (k = 0:
/// the identity). A negative k needs an inverse, which kiln does not have: an error.
Tensor matrix_power(const Tensor& x, int64_t k, Loc loc = Loc::current());
/// torch.vander: the Vandermonde matrix of a 1-d x, [n, N] (N = n when absent) with columns x^(N-1), ..., x^0,
/// or x^0, ..., x^(N-1) when increasing (a cumulative product, so with gradients); N >= 0.
Tensor vander(const Tensor& x, std::optional<int64_t> N = std::nullopt, bool increasing = false,
              Loc loc = Loc::current());

/// torch.einsum: the sum of products given by an equation, e.g. "bij,bjk->bik". Subscripts are
/// letters (spaces are ignored); a letter repeated in one operand takes its diagonal; letters missing
/// from the output are summed; without "->" the output is the letters that appear once, in
/// alphabetical order (upper case first), after the ellipsis dims. "..." stands for the dims no
/// letter names, broadcast (right-aligned) between operands, as are letters of extent 1. Operands are
/// contracted left to right, each pair by one (batched) matmul: shared kept letters are batch dims,
/// the summed ones are flattened into the inner dim K, the rest into M and N.
Tensor einsum(const std::string& equation, const std::vector<Tensor>& operands, Loc loc = Loc::current());

namespace linalg {
/// torch.linalg.cross: the cross product of 3-vectors along `dim` (extent 3 in both), a and b of
/// equal rank, their other dims broadcast.
Tensor cross(const Tensor& a, const Tensor& b, int64_t dim = -1, Loc loc = Loc::current());
/// torch.linalg.matrix_power: kiln::matrix_power.
Tensor matrix_power(const Tensor& x, int64_t k, Loc loc = Loc::current());
/// torch.linalg.multi_dot: the product of the matrices left to right; the first may be a 1-d row and the last a
/// 1-d column (their dims are dropped from the result); at least two.
Tensor multi_dot(const std::vector<Tensor>& tensors, Loc loc = Loc::current());
/// torch.linalg.vecdot: sum(x * y) along dim (x and y broadcast).
Tensor vecdot(const Tensor& x, const Tensor& y, int64_t dim = -1, Loc loc = Loc::current());
/// torch.linalg.vander: x [..., n] to [..., n, N] (N = n when absent), columns x^0, ..., x^(N-1); N >= 1.
Tensor vander(const Tensor& x, std::optional<int64_t> N = std::nullopt, Loc loc = Loc::current());
} // namespace linalg

} // namespace kiln
