#pragma once
// Training checkpoints: one folder per step under a root, e.g. out/ckpt_000100/, holding
//   model.safetensors      the model's state dict (tied weights stored once, see
//                          io::save_state_dict)
//   optimizer.safetensors  the optimizer's tensors; its scalars (steps, group options) in
//                          __metadata__ as shortest round-trip decimal strings
//   state.json             step, scheduler and loss-scaler scalars, RNG state, data-loader
//                          position, the run's config, and the size and CRC-32C of every other
//                          file, plus a CRC-32C of state.json's own content
// A checkpoint is written into a hidden temp folder (every file fsynced) and renamed into place,
// so a crash or error leaves either the complete new folder or nothing; older checkpoints beyond
// the newest keep_last are then deleted. Loading verifies every checksum and names the file
// that does not match. One process writes to a root at a time (rank 0 in distributed runs).
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tessera/core/generator.h"
#include "tessera/data/dataloader.h"
#include "tessera/nn/module.h"
#include "tessera/optim/grad_scaler.h"
#include "tessera/optim/lr_scheduler.h"
#include "tessera/optim/optimizer.h"

namespace tessera::io {

// Everything a training run needs to continue where it stopped.
struct Checkpoint {
  int64_t step = 0;
  nn::TensorDict model;           // Module::state_dict()
  optim::StateDict optimizer;     // Optimizer::state_dict()
  optim::StateDict scheduler;     // LRScheduler::state_dict() (scalars only)
  optim::StateDict grad_scaler;   // GradScaler::state_dict(); empty when the run has none
  std::array<uint64_t, 2> rng{};  // Generator::get_state(): (seed, offset)
  data::DataLoaderState data;     // the next batch to load
  std::string config = "{}";      // the run's configuration: a JSON object (read back compact)
};

// The live objects a checkpoint is taken from and restored into; null members are skipped (a
// null generator means default_generator()).
struct TrainingObjects {
  nn::Module* model = nullptr;
  optim::Optimizer* optimizer = nullptr;
  optim::LRScheduler* scheduler = nullptr;
  data::DataLoader* loader = nullptr;
  Generator* generator = nullptr;
  optim::GradScaler* grad_scaler = nullptr;
};

// Snapshot of the objects at `step`. The tensors alias the live ones: save it before training
// continues (save_checkpoint copies them to disk).
Checkpoint capture_checkpoint(int64_t step, const TrainingObjects& objects,
                              std::string config = "{}");
// Loads model (strict), optimizer, scheduler, loss scaler, RNG and loader position, in that order
// (the scheduler rewrites the lrs the optimizer's groups restored). A loss scaler keeps its
// state when the checkpoint has none (saved without a scaler, or before scalers were saved).
// Returns ckpt.step.
int64_t restore_checkpoint(const Checkpoint& ckpt, const TrainingObjects& objects);

// The folder name for a step: "ckpt_000100" (at least 6 digits).
std::string checkpoint_folder_name(int64_t step);

// Writes ckpt to root/ckpt_<step>/ atomically (replacing a folder of the same step), creating
// root if needed, then deletes all but the newest keep_last checkpoints (keep_last <= 0 keeps
// all; the one just written is always kept). Leftover temp folders of interrupted saves are
// removed. ValueError when config is not a JSON object; RuntimeError on I/O errors, in which
// case nothing under root changed. Returns the folder's path.
std::string save_checkpoint(const std::string& root, const Checkpoint& ckpt, int keep_last = 3);
// Deletes the oldest checkpoints under root, never the folder `keep`, until keep_last remain
// (none when keep_last <= 0). Model-parallel ranks save with keep_last 0 and prune once every rank
// has saved, so that a crash midway leaves a step every rank holds.
void prune_checkpoints(const std::string& root, int keep_last, const std::string& keep = "");
// Deletes the checkpoints under root of steps after `step` (a model-parallel resume drops the
// parts some ranks wrote of a save that did not complete on all).
void remove_checkpoints_after(const std::string& root, int64_t step);

// Removes the hidden temp folders under root that saves and deletions of old checkpoints left
// when the process died midway (none of them is ever a checkpoint). save_checkpoint starts with
// it; a resumed run calls it too, as it may end without saving again.
void remove_interrupted_writes(const std::string& root);

// Reads a checkpoint folder after verifying the size and CRC-32C of every file (ValueError
// "[load_checkpoint] expected ... got ..." naming the file on a mismatch or malformed content).
// The model and optimizer tensors view the mapped files without copying.
Checkpoint load_checkpoint(const std::string& folder);

// Checkpoint folders (ckpt_<step> holding a state.json) under root, oldest step first; empty
// when root does not exist.
std::vector<std::string> list_checkpoints(const std::string& root);
// The steps of those checkpoints, oldest first.
std::vector<int64_t> checkpoint_steps(const std::string& root);
// The newest checkpoint folder under root, if any.
std::optional<std::string> latest_checkpoint(const std::string& root);
// For --resume: path itself when it is a checkpoint folder, else the newest checkpoint under
// path; ValueError when there is neither.
std::string resolve_checkpoint(const std::string& path);

}  // namespace tessera::io
