/* tessera: neural-network training as StarPU task graphs. The umbrella header. */
#ifndef TESSERA_TESSERA_H
#define TESSERA_TESSERA_H

#include "tessera/error.h"
#include "tessera/data.h"
#include "tessera/tiles.h"
#include "tessera/runtime.h"
#include "tessera/optim.h"
#include "tessera/net.h"
#include "tessera/augment.h"
#include "tessera/train.h"
#include "tessera/log.h"
#include "tessera/checkpoint.h"
#include "tessera/plan.h"

#endif
