#pragma once
/// \file kiln.h
/// kiln's umbrella header: tensors, ops, autograd, compile, nn, optim, data, checkpoints,
/// attention, transformer and recurrent layers, distributed training, options, devices, version. Pulls in no LLVM,
/// TBB or CUDA header.

#include "kiln/version.h" // first: it stops a compile that is not C++20 with a clear message

#include "kiln/anomaly.h"
#include "kiln/arrange.h"
#include "kiln/autograd.h"
#include "kiln/checkpoint.h"
#include "kiln/compile.h"
#include "kiln/data.h"
#include "kiln/device.h"
#include "kiln/devices.h"
#include "kiln/dist.h"
#include "kiln/dtype.h"
#include "kiln/error.h"
#include "kiln/functional.h"
#include "kiln/indexops.h"
#include "kiln/linalg.h"
#include "kiln/nn.h"
#include "kiln/nn_utils.h"
#include "kiln/optim.h"
#include "kiln/options.h"
#include "kiln/profile.h"
#include "kiln/rnn.h"
#include "kiln/scalar.h"
#include "kiln/special.h"
#include "kiln/tensor.h"
#include "kiln/transformer.h"
