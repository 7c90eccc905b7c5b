/* tpusim's public API in one include, bottom layer first.
 *
 *   the chip (sim/)       error.h dtype.h bf16.h config.h mxu.h gemm.h scalesim.h program.h
 *                         device.h
 *   the host (host/)      tune.h runtime.h shard.h models.h net.h reference.h quantize.h
 *                         dataset.h dataset_input.h checkpoint.h npy.h topology_file.h
 *                         keras.h
 *
 * Each header also stands alone. The host reaches the chip through device.h only; nothing
 * in the chip's headers knows of the host's. */
#ifndef TPUSIM_TPUSIM_H
#define TPUSIM_TPUSIM_H

#include "tpusim/error.h"
#include "tpusim/dtype.h"
#include "tpusim/bf16.h"
#include "tpusim/config.h"
#include "tpusim/mxu.h"
#include "tpusim/gemm.h"
#include "tpusim/scalesim.h"
#include "tpusim/program.h"
#include "tpusim/device.h"

#include "tpusim/tune.h"
#include "tpusim/runtime.h"
#include "tpusim/shard.h"
#include "tpusim/equivalence.h"
#include "tpusim/models.h"
#include "tpusim/net.h"
#include "tpusim/reference.h"
#include "tpusim/quantize.h"
#include "tpusim/dataset.h"
#include "tpusim/dataset_input.h"
#include "tpusim/checkpoint.h"
#include "tpusim/npy.h"
#include "tpusim/topology_file.h"
#include "tpusim/sweep.h"
#include "tpusim/keras.h"

#endif
