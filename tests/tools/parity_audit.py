#!/usr/bin/env python3
"""A PyTorch-parity audit of kiln's public API: lists the public names of torch that model and training code calls
(torch.* tensor functions, torch.Tensor methods, torch.nn.functional.*, torch.nn module classes, torch.linalg.*,
torch.special.*) and, for each, whether kiln's public headers (frontend/include/kiln/*.h) declare a function, method
or class of that name. The match is by name only (after comments are removed): it says a name exists, not that its
arguments or semantics match PyTorch's. Names kiln spells differently are in SPELLED_DIFFERENTLY, each with kiln's
name (which must itself be declared). In-place forms (a trailing underscore) are counted, not listed. Run with
Debian's python3-torch from the repository root:
    /usr/bin/python3 tests/tools/parity_audit.py [--all]
Prints a count per namespace and the missing names (--all: the found ones too)."""
import glob
import inspect
import os
import re
import sys

import torch
import torch.nn.functional as F

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
HEADERS = sorted(glob.glob(os.path.join(ROOT, "frontend", "include", "kiln", "*.h")))

# torch's name -> kiln's name, where kiln declares the same thing under another name (not an alias in torch).
SPELLED_DIFFERENTLY = {
    "torch.cat": "concat",
    "torch.concatenate": "concat",
    "torch.linalg.vector_norm": "linalg_vector_norm",
    "Tensor.type": "to",
    "Tensor.double": "to",
    "Tensor.float": "to",
    "Tensor.long": "to",
    "Tensor.int": "to",
    "Tensor.bool": "to",
    "Tensor.cpu": "to",
    "Tensor.cuda": "to",
    "Tensor.numpy": "to_vector",
    "Tensor.tolist": "to_vector",
    "Tensor.data_ptr": "to_vector",
    "Tensor.ndimension": "dim",
    "Tensor.nelement": "numel",
    "torch.tensor": "from_vector",
    "torch.as_tensor": "from_vector",
    "torch.from_numpy": "from_vector",
}

# Names the headers match that are something else there (a container's empty(), a parameter or type named so):
# counted as missing.
FALSE_MATCHES = {"empty", "mode", "char"}

# Missing names with a note on why, printed after the lists.
NOTES = {
    "torch.dist": "kiln::dist is the distributed namespace: write norm(a - b, p)",
}

# Names that are not model or training code: torch's internals, backends, storage, quantization, sparse and
# complex layouts, named tensors, the C++ extension API, dtype and printing settings.
SKIP = re.compile(
    r"^(fbgemm|quantize|quantized|q_|dequantize|mkldnn|cudnn|miopen|native_|sparse|to_sparse|is_sparse|"
    r"set_|get_|is_grad|is_inference|is_vulkan|is_mkldnn|is_quantized|is_meta|is_ort|is_ipu|is_xpu|is_mps|is_hpu|"
    r"is_nested|storage|untyped_storage|record_stream|share_memory|is_shared|is_pinned|pin_memory|"
    r"align_|refine_names|rename|names|has_names|segment_reduce|sym_|slice_scatter|select_scatter|"
    r"diagonal_scatter|as_strided|resize|nested|classes|compiled_with|from_file|frombuffer|"
    r"promote_types|result_type|can_cast|use_deterministic|are_deterministic|autocast|vmap|"
    r"empty_quantized|unify_type|import_ir|merge_type|parse_|wait|fork|save|load|typename|"
    r"chain_matmul|conj_physical|resolve_|is_conj|is_neg|view_as_real|view_as_complex|"
    r"real|imag|angle|polar|complex|conj|adjoint|indices|values|crow_|col_indices|row_indices|ccol_|"
    r"coalesce|is_coalesced|dense_dim|sparse_dim|smm|sspaddmm|hspmm|int_repr|qscheme|"
    r"lu_unpack|lu_solve|lu|lobpcg|pca_lowrank|svd_lowrank|stft|istft|bartlett|blackman|hamming|hann|"
    r"kaiser|fft|ifft|rfft|irfft|histc|histogram|histogramdd|"
    r"cpp|is_storage|is_tensor|is_floating_point|is_complex|is_nonzero|is_same_size|is_signed|"
    r"dsmm|saddmm|spmm|ctc_loss|batch_norm_|cudnn_|gru_cell|lstm_cell|rnn_relu_cell|rnn_tanh_cell|"
    r"rnn_relu|rnn_tanh|nuclear_norm|frobenius_norm|dstack|hstack|vstack|column_stack|row_stack|"
    r"hsplit|vsplit|dsplit|tensor_split|channel_shuffle|pixel_|layer_norm|group_norm|instance_norm|"
    r"constant_pad_nd|conv_tbc|convolution|conv_transpose|embedding_renorm|feature_|alpha_dropout|"
    r"fused_|affine_grid_generator|grid_sampler|cosine_embedding_loss|hinge_embedding_loss|"
    r"kl_div|margin_ranking_loss|poisson_nll_loss|triplet_margin_loss|binary_cross_entropy_with_logits|"
    r"bilinear|threshold|prelu|rrelu|celu|selu|dropout|adaptive_|avg_pool|max_pool|"
    r"candidate|classproperty|obj$|choose_qparams|fake_quantize|init_num_threads|initial_seed|seed$|is_anomaly|"
    r"is_autocast|is_deterministic|is_warn|is_distributed|prepare_multiprocessing|read_vitals|vitals_enabled|hsmm|"
    r"from_dlpack|to_dlpack|unsafe_|norm_except_dim|geqrf|orgqr|ormqr|symeig|eig$|as_subclass|ipu|xpu|is_set_to|"
    r"new$|reinforce|to_dense|to_mkldnn|to_padded_tensor|cdouble|cfloat|chalf|"
    r"_|.*_copy$)")


def strip_comments(text):
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    return re.sub(r"//[^\n]*", " ", text)


def kiln_names():
    """name -> headers: every identifier declared as a function (an identifier before '('), a class or struct,
    or a `using` alias, in kiln's public headers."""
    found = {}
    for path in HEADERS:
        text = strip_comments(open(path).read())
        names = set(re.findall(r"\b([A-Za-z_]\w*)\s*\(", text))
        names |= set(re.findall(r"\b(?:class|struct)\s+([A-Za-z_]\w*)", text))
        names |= set(re.findall(r"\busing\s+([A-Za-z_]\w*)\s*=", text))
        for n in names:
            found.setdefault(n, []).append(os.path.basename(path))
    return found


def public(names):
    return sorted(n for n in names if not n.startswith("_"))


def torch_functions():
    out = []
    for n in public(dir(torch)):
        obj = getattr(torch, n)
        if inspect.ismodule(obj) or inspect.isclass(obj) or not callable(obj) or not n.islower():
            continue
        out.append(n)
    return out


def tensor_methods():
    out = []
    for n in public(dir(torch.Tensor)):
        obj = getattr(torch.Tensor, n)
        if callable(obj) and not inspect.isclass(obj):
            out.append(n)
    return out


def functional_names():
    return [n for n in public(dir(F)) if inspect.isfunction(getattr(F, n)) or callable(getattr(F, n))
            if n.islower() and not inspect.ismodule(getattr(F, n)) and n not in ("boolean_dispatch", "handle_torch_function",
                                                                                   "has_torch_function",
                                                                                   "has_torch_function_unary",
                                                                                   "has_torch_function_variadic",
                                                                                   "assert_int_or_pair",
                                                                                   "native_channel_shuffle")]


def module_classes():
    out = []
    for n in public(dir(torch.nn)):
        obj = getattr(torch.nn, n)
        if inspect.isclass(obj) and issubclass(obj, torch.nn.Module) and n not in ("Module",):
            out.append(n)
    return out


def submodule_functions(mod):
    return [n for n in public(dir(mod)) if callable(getattr(mod, n)) and not inspect.isclass(getattr(mod, n))
            and not inspect.ismodule(getattr(mod, n)) and n.islower()]


# Modules that are not layers a model builds from: containers and wrappers torch needs for Python reasons.
MODULE_SKIP = {"Container", "NonDynamicallyQuantizableLinear", "ParameterDict", "ParameterList", "LazyLinear",
               "LazyConv1d", "LazyConv2d", "LazyConv3d", "LazyConvTranspose1d", "LazyConvTranspose2d",
               "LazyConvTranspose3d", "LazyBatchNorm1d", "LazyBatchNorm2d", "LazyBatchNorm3d",
               "LazyInstanceNorm1d", "LazyInstanceNorm2d", "LazyInstanceNorm3d", "SyncBatchNorm",
               "DataParallel", "UninitializedParameter", "UninitializedBuffer", "Parameter"}


def audit():
    have = kiln_names()
    spaces = [
        ("torch", "torch.", [n for n in torch_functions() if not SKIP.match(n)]),
        ("Tensor", "Tensor.", [n for n in tensor_methods() if not SKIP.match(n)]),
        ("torch.nn.functional", "F.", functional_names()),
        ("torch.nn", "nn.", [n for n in module_classes() if n not in MODULE_SKIP]),
        ("torch.linalg", "torch.linalg.", submodule_functions(torch.linalg)),
        ("torch.special", "torch.special.", submodule_functions(torch.special)),
    ]
    report = []
    for title, prefix, names in spaces:
        inplace = [n for n in names if n.endswith("_") and not n.endswith("__")]
        names = [n for n in names if n not in inplace]
        rows = []
        for n in names:
            key = ("torch." if prefix == "torch." else prefix if prefix != "F." else "F.") + n
            kiln = SPELLED_DIFFERENTLY.get(key, SPELLED_DIFFERENTLY.get(prefix + n, n))
            rows.append((n, kiln, kiln in have and kiln not in FALSE_MATCHES))
        report.append((title, rows, inplace))
    return report


def main():
    show_all = "--all" in sys.argv
    for title, rows, inplace in audit():
        found = [r for r in rows if r[2]]
        print("%-20s %4d names, %4d found, %4d missing (%d in-place forms not counted)" %
              (title, len(rows), len(found), len(rows) - len(found), len(inplace)))
    for title, rows, _ in audit():
        missing = [n for n, _, ok in rows if not ok]
        print("\n%s missing (%d):" % (title, len(missing)))
        print("  " + " ".join(missing))
        for name, note in NOTES.items():
            if name.startswith(title + ".") and name[len(title) + 1:] in missing:
                print("  note: %s: %s" % (name, note))
        if show_all:
            print("%s found:" % title)
            print("  " + " ".join(n if k == n else "%s(=%s)" % (n, k) for n, k, ok in rows if ok))


if __name__ == "__main__":
    main()
