"""The config schema: every key with its default and what it means.

Recipes in this folder start from `get_config()` here and override a few keys.
A key that is not declared here is an error (exit 2), so this file is the one
place to learn what can be set. Empty strings and 0 mean "unset" where the
comment says so; the schema has no None so that every key has a type.
"""

import ml_collections

from configs import sharding


def get_config() -> ml_collections.ConfigDict:
  config = ml_collections.ConfigDict()

  # --- Model -----------------------------------------------------------------
  config.model = ml_collections.ConfigDict()
  config.model.name = 'resnet18'  # registry name, see models/registry.py
  config.model.num_classes = 0  # 0: take the number of classes from the data
  config.model.dtype = 'auto'  # compute dtype: auto (bfloat16 on GPUs and TPUs, float32 on CPU), float32 or bfloat16; parameters stay float32
  config.model.width = 0  # base width: ResNet stem and first-stage channels, ViT hidden size (MLP 4x, heads width/64), AlexNet, VGG, GoogLeNet first conv's channels (the rest scaled); 0: the published width
  config.model.depth = 0  # ViT: encoder blocks, at most 48 (ViT-G/14's); 0: the published depth (other models: 0 only)
  config.model.remat = 'none'  # rematerialisation: none, full, dots (models/remat.py)
  config.model.drop_path_rate = 0.0  # ResNet, ViT: stochastic depth of the last block, rising linearly from 0 at the first; training only
  config.model.gelu = 'tanh'  # ViT: the MLP's GELU, tanh (its approximation, as big_vision and the AugReg checkpoints) or erf (exact, as timm and PyTorch)
  config.model.dropout_rate = 0.0  # ViT: dropout after the embeddings, attention output and MLP layers; training only
  config.model.bn_group_size = 0  # batch-norm statistics over groups of G examples (32 per worker in large-batch ImageNet); 0: the whole batch
  config.model.conv_form = 'auto'  # how convolutions compute (models/conv_forms.py): auto (by_shape on CPU, xla elsewhere), xla, patches, by_shape; same parameters and results

  # --- Data ------------------------------------------------------------------
  config.data = ml_collections.ConfigDict()
  config.data.source = 'shapes'  # shapes, folder, tfds, synthetic
  config.data.name = ''  # tfds data set name: imagenet2012, imagenette/320px-v2, imagenet_v2, ...
  config.data.dir = ''  # data root; shapes: cache dir ('' = ~/.cache/imagetrain/shapes-v1); tfds: data dir ('' = $TFDS_DATA_DIR or ~/tensorflow_datasets)
  config.data.manual_dir = ''  # tfds: downloaded archives to prepare data.name into data.dir (imagenet2012: ILSVRC2012_img_{train,val}.tar)
  config.data.train_split = 'train'  # folder: sub-folder with training images; tfds: split, slices allowed (train[:99%])
  config.data.eval_split = 'val'  # folder: sub-folder with evaluation images; tfds: split (imagenet2012: validation)
  config.data.val_fraction = 0.0  # folder without train/ and val/ (class folders directly in data.dir): fraction of each class held out for evaluation, chosen by seed; 0: off
  config.data.image_size = 32  # training and evaluation resolution in pixels
  config.data.augment = 'crop_flip'  # training augmentation: none, flip, crop_flip, inception_crop (random resized crop + flip)
  config.data.snap_crops_to_jpeg_blocks = True  # inception_crop: move a crop's left edge <= 15 px left onto the JPEG block grid, from where the decoder writes rows straight into the output (docs/data.md); False: exact positions
  config.data.jpeg_scaled_decode = False  # inception_crop, and tfds data's centre crops (eval, crop_flip): decode a JPEG crop at 1/2, 1/4 or 1/8 scale in the DCT domain when it stays >= data.image_size (docs/input-speed.md); False: full scale
  config.data.eval_crop_fraction = 0.875  # tfds: eval centre square's side / shorter image side (0.875: resize to S/0.875, crop S)
  config.data.num_synthetic_examples = 4096  # synthetic: examples per split
  config.data.num_synthetic_classes = 1000  # synthetic: number of classes (labels)
  config.data.prefetch_batches = 2  # host batches prepared ahead of the step
  config.data.stall_timeout_s = 600.0  # seconds the loop waits for a host batch (or 20 recent batch intervals, if longer) before it stops the run with exit 69, saving nothing new; covers a first ImageNet batch on a slow host; 0: wait for ever
  config.data.randaugment_num_ops = 0  # RandAugment on the host after the crop and flip (docs/augmentation.md; not synthetic data): operations per image, at most 15, each applied with probability 0.5 (timm's 15, increasing magnitudes; DeiT: 2); 0: off
  config.data.randaugment_magnitude = 9.0  # RandAugment magnitude on timm's 0-10 scale (DeiT: 9)
  config.data.randaugment_magnitude_std = 0.0  # RandAugment: each operation's magnitude drawn from N(magnitude, this), clipped to [0, 10] (DeiT: 0.5); 0: fixed
  config.data.random_erasing_prob = 0.0  # probability of replacing a box of 2%-1/3 of an image by normal noise, timm's random erasing (DeiT: 0.25); 0: off
  config.data.repeated_augmentation = 0  # repeated augmentation: each image of an epoch's order this many times, each copy augmented anew, in the same batch; the epoch keeps its length, so covers 1/this of the images (DeiT: 3); 0 or 1: off

  # --- Optimisation ----------------------------------------------------------
  config.batch_size = 128  # global batch: all devices of all processes
  config.num_train_steps = 0  # length of training in steps; wins when > 0
  config.num_epochs = 10.0  # length of training in epochs when steps is 0
  config.optimizer = 'sgd'  # sgd (with momentum), adamw, lars (large batches, You et al. 2017), lamb (You et al. 2020); none decays or trust-ratios biases and norms
  config.learning_rate = 0.1  # peak rate for a global batch of 256
  config.lr_scaling = 'linear'  # linear: rate * batch_size / 256; none: as given
  config.lr_schedule = 'cosine'  # after warm-up: cosine, constant, step (times lr_step_factor at each of lr_step_epochs), poly (to 0 as (1 - t)^lr_poly_power, t: the share of the steps after warm-up)
  config.lr_step_epochs = '30,60,80'  # lr_schedule=step: epochs, from the start of training, where the rate falls
  config.lr_step_steps = ''  # lr_schedule=step: steps, from the start of training, where the rate falls instead of lr_step_epochs (BiT's fine-tuning: 6000,12000,18000); '': lr_step_epochs
  config.lr_step_factor = 0.1  # lr_schedule=step: the rate's factor at each of lr_step_epochs (or lr_step_steps)
  config.lr_poly_power = 2.0  # lr_schedule=poly: the decay's power (2: MLPerf's LARS ResNet-50)
  config.warmup_steps = 0  # linear warm-up in steps; wins when > 0
  config.warmup_epochs = 0.0  # linear warm-up in epochs when steps is 0
  config.momentum = 0.9  # sgd, lars momentum; adamw, lamb beta1
  config.nesterov = False  # sgd, lars: Nesterov momentum
  config.trust_coefficient = 0.001  # lars: the trust ratio's coefficient (eta)
  config.ema_decay = 0.0  # keep an exponential moving average of the weights with this decay (DeiT: 0.99996), evaluated beside them; 0: off
  config.layer_decay = 1.0  # ViT fine-tuning: encoder block i's rate times layer_decay^(depth - i), the head's at full rate; 1: off
  config.weight_decay = 1e-4  # decoupled for adamw and lamb, L2 (added to the gradient) for sgd and lars; not on biases or norms
  config.label_smoothing = 0.0  # label smoothing for the cross-entropy
  config.mixup_alpha = 0.0  # mixup Beta(alpha, alpha) mixing; 0: off
  config.cutmix_alpha = 0.0  # CutMix: paste a box of another example's image covering 1 - Beta(alpha, alpha) of the area, labels mixed by the pasted area (DeiT: 1.0); 0: off
  config.mixup_switch_prob = 0.5  # with both mixup_alpha and cutmix_alpha > 0: the probability that a step's batch uses CutMix rather than mixup
  config.grad_accum_steps = 1  # micro-batches per step (gradient accumulation)
  config.grad_clip_norm = 0.0  # clip the global gradient norm; 0: no clipping
  config.nonfinite = 'stop'  # non-finite loss or gradients: stop (keep the last good checkpoint), skip (drop the update)
  config.seed = 0  # the one seed that parameters, data order and augmentation derive from

  # --- Parallelism -----------------------------------------------------------
  config.mesh = ml_collections.ConfigDict()
  config.mesh.data = -1  # data-parallel axis size; -1 fills the remaining devices
  config.mesh.fsdp = 1  # fully sharded data-parallel axis (ZeRO-3) size
  config.mesh.tensor = 1  # tensor-parallel axis size
  config.mesh.shard_update = False  # spmd: split optimiser state and update over the data axis (weight-update sharding, ZeRO-1)
  # Logical parameter axis -> mesh axes ('data,fsdp' = both; '' = replicated);
  # the named sets of configs/sharding.py by name on the command line
  # (--config.sharding_rules=FSDP). Data, not code: a change of parallelism
  # is a change here and in config.mesh, never in the model.
  config.sharding_rules = sharding.FSDP_TENSOR
  config.engine = 'spmd'  # spmd (jit over the mesh), ps (parameter-server emulation), allreduce (ring all-reduce emulation); ARCHITECTURE.md

  # --- The emulated network (engine='ps' or 'allreduce') -----------------------
  config.network = ml_collections.ConfigDict()
  config.network.num_workers = 0  # N_w: worker devices; 0: every device
  config.network.bandwidth_gbps = 0.0  # per network interface and direction, Gbit/s; 0: unlimited
  config.network.latency_ms = 0.0  # one-way latency of every message
  config.network.devices_per_host = 1  # G: workers per emulated host; a host's workers share its one NIC (the interface above)
  config.network.intra_host_gbps = 0.0  # each worker's port into its host's fabric (NVLink, PCIe), Gbit/s per direction; 0: unlimited
  config.network.intra_host_latency_ms = 0.0  # one-way latency inside a host

  # --- All-reduce emulation (engine='allreduce') --------------------------------
  config.allreduce = ml_collections.ConfigDict()
  config.allreduce.algorithm = 'ring'  # ring (one ring through every worker), hierarchical (inside each host, then rings across hosts)

  # --- Parameter-server emulation (engine='ps') --------------------------------
  config.ps = ml_collections.ConfigDict()
  config.ps.num_shards = 1  # N_ps: server shards in host memory
  config.ps.mode = 'sync'  # sync (one aggregated update per step, = SPMD data parallelism), async (each gradient applied on arrival)
  config.ps.max_staleness = 1  # async: steps a worker may run ahead of the slowest (0: none; sync needs 1)
  config.ps.partitioner = 'greedy'  # greedy (balance bytes; large variables split along axis 0), round_robin (whole variables in turn)
  config.ps.overlap = False  # push a layer's gradient as soon as backprop produces it, while earlier layers still compute

  # --- The planner (--mode=plan) and the study (--mode=study) -----------------
  config.plan = ml_collections.ConfigDict()
  config.plan.per_worker_batch_sizes = '2,4,8,16,32,64'  # per-worker mini-batches to sweep (up to what fits)
  config.plan.repeats = 5  # timed runs per measurement (median)
  config.plan.num_workers = 0  # N_w: devices of the cluster to plan for, all hosts together; 0: with plan.probe the probed devices, else network.num_workers, else every device
  config.plan.devices_per_host = 1  # G: devices per host, sharing the host's one NIC (hosts = plan.num_workers / G; 1: a flat cluster)
  config.plan.link_bandwidth_gbps = 10.0  # each host's NIC, Gbit/s per direction
  config.plan.link_latency_ms = 0.05  # the NIC's one-way latency, ms
  config.plan.intra_host_gbps = 0.0  # each device's port into its host's fabric (NVLink, PCIe), Gbit/s per direction; 0: unlimited
  config.plan.intra_host_latency_ms = 0.0  # one-way latency inside a host, ms
  config.plan.host_cores = 0  # C: each host's CPU cores for its input pipeline; a step then takes at least the time they need to decode its G devices' images (docs/planner.md); 0: not counted
  config.plan.host_cpu_ms_per_image = 1.37  # CPU ms to decode and augment one image on such a host; default: inception_crop at 224 px on ImageNet-like JPEGs (results/input_pipeline/input_pipeline.jsonl; measure yours with --mode=bench --config.bench.data=real)
  config.plan.ps_placement = 'dedicated'  # where PS shards live: dedicated (server hosts of their own), colocated (on the worker hosts, sharing their NICs)
  config.plan.allreduce_algorithms = 'ring,hierarchical'  # all-reduce algorithms compared with PS: ring (one ring through every device), hierarchical (inside each host, then rings across hosts)
  config.plan.overlap = False  # the cluster's framework overlaps communication with backprop, the last plan.backprop_share of T_C (Horovod, PyTorch DDP do); False: compute, then communication
  config.plan.backprop_share = 2 / 3  # with plan.overlap: the backward pass's share of T_C, which communication hides behind; 2/3 is the FLOP split (backward = 2 x forward)
  config.plan.compute_s = 0.0  # a stated T_C at per-device batch plan.compute_s_batch, other batches in proportion; 0: from the device peak, else measured here
  config.plan.compute_s_batch = 0  # the per-device batch plan.compute_s is for; 0: the smallest of plan.per_worker_batch_sizes
  config.plan.device_tflops = 0.0  # the cluster's device peak, TFLOP/s in the model's dtype; 0: the devices at hand
  config.plan.device_utilization = 0.4  # fraction of that peak a train step reaches (T_C = FLOPs / (peak * this))
  config.plan.device_memory_gib = 0.0  # memory of the cluster's device: larger batches are not tried; 0: as the devices at hand (runtime.device_memory_gib); for plan.parallelism=mesh, 0: no limit
  config.plan.target = 'cluster'  # cluster: the devices are named by plan.device_tflops, plan.compute_s or plan.probe (--mode=plan refuses none); here: a cluster of the devices at hand, timed here
  config.plan.parallelism = 'data'  # data: batch size, hosts and all-reduce or PS for data parallelism; mesh: the fastest (data, fsdp, tensor) mesh, ZeRO-1, remat and accumulation whose step fits plan.device_memory_gib, for batch_size over plan.num_workers devices compiled here (docs/mesh-planner.md)
  config.plan.mesh_derive = True  # plan.parallelism=mesh: compile a ViT at 1 and 2 blocks and extrapolate to its depth (minutes instead of an hour); False: compile each candidate whole
  config.plan.probe = ''  # a work dir holding probe.json (--mode=probe): T_C, the links' latency and bandwidth and each step's fixed cost come from it (docs/probe.md)
  config.plan.time_steps = 0  # plan.parallelism=mesh: time this many real steps of each answered configuration (the fastest and the next two) on this job's devices and answer the fastest timed; needs plan.probe of these devices; 0: answer from the costing alone
  config.study = ml_collections.ConfigDict()
  config.study.models = 'resnet18,alexnet'  # registry names: one compute-heavy, one communication-heavy
  config.study.engines = 'ps,allreduce'  # engines each setting runs under: ps (once per N_ps), allreduce (a ring of the workers over the same links, once)
  config.study.model_width = 16  # model.width of every study model (0: published)
  config.study.num_workers = '2,4'  # N_w grid
  config.study.num_shards = '1,2,4'  # N_ps grid
  config.study.devices_per_host = '1'  # grid of workers per emulated host (network.devices_per_host); the study's other network.* keys apply to every cell
  config.study.allreduce_algorithms = 'ring'  # allreduce cells with more than one worker a host run each of these (ring, hierarchical)
  config.study.link_bandwidths_gbps = '0.5,8'  # link grid, Gbit/s (> 0): one where every model waits for the network, one where only the communication-heavy one does
  config.study.global_batch_sizes = '64,256'  # global batch grid (all workers together)
  config.study.steps = 8  # timed steps per cell, under either engine (after 2 warm-up steps)

  # --- Measuring the real network and devices (--mode=probe, docs/probe.md) ---
  config.probe = ml_collections.ConfigDict()
  config.probe.min_message_bytes = 4096  # smallest all-reduce and all-gather message timed, bytes per device
  config.probe.max_message_bytes = 0  # largest message, bytes per device; 0: the model's parameter bytes (its gradients' all-reduce)
  config.probe.num_sizes = 6  # message sizes timed, log-spaced from the smallest to the largest
  config.probe.repeats = 5  # timed calls per collective and size, and per per-device batch of the model (median; plan.per_worker_batch_sizes are the batches)
  config.probe.ops_per_call = 4  # collectives chained in one program call, which share the call's dispatch (a step's collectives run inside one program)
  config.probe.step_repeats = 20  # timed steps (median) of each tiny model whose time on all devices, less on one, gives a step's fixed cost and its cost per array of its all-reduce
  config.probe.host_grouping = 'auto'  # which devices form a host: process (each process's own), hostname (the processes of one machine together), auto (process on CPU, whose processes talk over gloo's sockets even on one machine; hostname on GPUs and TPUs)
  config.probe.mesh_collectives = True  # also time each collective a sharded step runs (all-reduce, all-gather, all-to-all, collective-permute) on the device groups of a mesh's axes, inside a program: the mesh planner's cost per collective (plan.parallelism=mesh)
  config.probe.input_batches = 10  # real data (data.source other than synthetic): host batches of the input pipeline timed alone, after one warm-up batch

  # --- Cadences and outputs --------------------------------------------------
  config.log_every_steps = 50  # progress line and train metrics
  config.eval_every_steps = 0  # 0: evaluate once per epoch and at the end
  config.checkpoint = ml_collections.ConfigDict()
  config.checkpoint.every_steps = 500  # save every N steps (and always at the end)
  config.checkpoint.every_minutes = 0.0  # also save when this much time passed; 0: off
  config.checkpoint.keep = 3  # keep the last K checkpoints
  config.checkpoint.keep_best = False  # also keep the checkpoint with the best eval accuracy
  config.checkpoint.async_save = True  # write checkpoints in the background
  config.metrics = ml_collections.ConfigDict()
  config.metrics.plots_at_end = True  # a finished training run draws --mode=report's PNGs into the work dir (process 0)
  config.metrics.wandb_project = ''  # also send the metrics to this Weights & Biases project (needs the wandb package); '': off
  config.metrics.wandb_entity = ''  # the W&B team or user; '': the login's default
  config.metrics.wandb_mode = 'online'  # online, or offline: written to WORKDIR/wandb only, for `wandb sync` later

  # --- Speed: --mode=bench and profiling ---------------------------------------
  config.bench = ml_collections.ConfigDict()
  config.bench.steps = 20  # timed steps (after the warm-up)
  config.bench.warmup_steps = 3  # untimed steps after compiling
  config.bench.data = 'synthetic'  # synthetic: the step alone, on random images of the configured shapes; real: the configured data, whose input pipeline is timed alone first (CPU ms per image, images/s per host core, the cores the devices need)
  config.profile_steps = ''  # 'A,B': trace train steps A..B-1 with the JAX profiler into WORKDIR/profile (TensorBoard); '': off

  # --- Evaluation ------------------------------------------------------------
  config.eval = ml_collections.ConfigDict()
  config.eval.checkpoint = 'latest'  # --mode=eval, predict and export: which checkpoint: latest, best (from checkpoints_best/), or a step number
  config.eval.batch_size = 0  # global batch of training's evals, --mode=eval and --mode=predict; 0: same as batch_size
  config.eval.weights = 'raw'  # raw or ema (needs ema_decay > 0): the weights --mode=eval, predict and export use and checkpoint.keep_best ranks by
  # Evaluation data, when it differs from training's (same classes, e.g. tfds
  # imagenet_v2 for an imagenet2012 run); read by --mode=eval and training's evals.
  config.eval.dataset = ''  # tfds data set name; '': data.name
  config.eval.split = ''  # evaluation data: split (tfds) or sub-folder (folder data); '': data.eval_split
  config.eval.data_dir = ''  # evaluation data: root (tfds data dir, or the image folder); '': data.dir

  # --- Classifying images (--mode=predict) ------------------------------------
  config.predict = ml_collections.ConfigDict()
  config.predict.inputs = ''  # comma-separated image files, folders (searched below for .jpg/.jpeg/.png) and .txt lists (one path a line)
  config.predict.top_k = 5  # classes reported per image, most probable first
  config.predict.output = ''  # also write the JSON lines to this file; '': standard output only

  # --- Exporting a model (--mode=export, docs/export.md) ----------------------
  config.export = ml_collections.ConfigDict()
  config.export.format = 'saved_model'  # saved_model: a TensorFlow SavedModel; big_vision (ViT): the weights as an AugReg .npz; timm (ViT, ResNet): as timm's model.safetensors (docs/published-weights.md)
  config.export.dir = ''  # the export's directory (must not exist) for eval.checkpoint's weights (eval.weights); '': WORKDIR/export/step_N (step_N_ema for the moving average; _big_vision or _timm after it for those formats)

  # --- Runtime ---------------------------------------------------------------
  config.runtime = ml_collections.ConfigDict()
  config.runtime.num_cpu_devices = 0  # CPU only: devices to emulate; 0: one per core
  # Memory per device for the fit check; 0: what the device reports (on a
  # CPU: the host memory this process can use, shared by its devices).
  config.runtime.device_memory_gib = 0.0
  # Several processes (one per host, or per GPU): how they find each other
  # when --coordinator_address is not given. auto: JAX's detection of SLURM
  # and Open MPI (mpirun) environments; slurm, ompi: that one only; none:
  # one process, whatever the environment.
  config.runtime.cluster = 'auto'
  config.runtime.init_timeout_s = 300  # wait this long for every process to join
  # A process that stops answering for this long ends the run on all others.
  config.runtime.heartbeat_timeout_s = 30
  # After SIGTERM or Ctrl-C, how long the loop may stay held in a native call
  # (a collective a peer never joins, a device wait) before the process ends
  # with exit 75 and nothing new saved. Keep it under the scheduler's grace
  # period: 30 s by default on Slurm, Kubernetes and the clouds.
  config.runtime.stop_held_limit_s = 20.0
  # Processes agree on stops and time-based saves every this many steps
  # (coordination/agreement.py): a stop or save waits at most that long.
  config.runtime.agree_every_steps = 10
  # Keep compiled programs in this folder (shared by every run that uses it)
  # and load them instead of compiling again: restarts and evals start in
  # seconds. '': compile every time.
  config.runtime.compilation_cache_dir = ''
  # CPU: XLA computes matrix products with XNNPACK (YNNPACK) kernels instead
  # of its own; ResNet-18's steps measured faster, ResNet-50's the same within
  # the noise (docs/performance.md, "XNNPACK matrix products"). Also
  # what the patches form of a convolution runs on. An --xla_cpu_use_xnnpack
  # in XLA_FLAGS wins. No effect on GPUs and TPUs.
  config.runtime.cpu_xnnpack = True
  # GPUs: XLA's flags for overlapping collectives with compute, a 90% memory
  # pool and single-host NCCL settings, as docs/gpus.md lists them with their
  # sources; each only where the environment does not set it already.
  config.runtime.gpu_defaults = True

  # --- Starting from another run (fine-tuning) ---------------------------------
  config.init = ml_collections.ConfigDict()
  config.init.from_workdir = ''  # another run's work dir: start from its parameters
  config.init.checkpoint_step = -1  # its checkpoint to use; -1: latest
  config.init.reset_head = False  # re-initialise the classifier (other classes)
  config.init.from_weights = ''  # a published weights file: big_vision .npz ViT, timm .safetensors or .npz ViT or ResNet, Keras .h5 VGG (docs/published-weights.md)
  config.init.weights_format = 'auto'  # its layout: auto (from the file), big_vision, timm or keras

  # --- Debugging (fault injection for tests; not for normal runs) -------------
  config.debug = ml_collections.ConfigDict()
  config.debug.nan_at_step = -1  # make the loss of this step NaN; -1: off
  config.debug.fail_at_step = -1  # raise an error after this step; -1: off
  config.debug.pause_at_step = -1  # after this step, wait for SIGINT/SIGTERM (then save and stop); at an evaluated step, and in --mode=eval of its checkpoint, in the evaluation after batch 1; -1: off
  config.debug.fail_process = 0  # the process debug.fail_at_step fails (-1: every one)
  config.debug.stall_after_step = -1  # the training input hands out this step's batch, then blocks (a stalled pipeline); a run resumed from this step on does not; -1: off
  config.debug.stall_for_s = 0.0  # how long debug.stall_after_step blocks, in seconds; 0: for ever
  config.debug.stall_process = -1  # the process whose input debug.stall_after_step blocks (-1: every one)
  config.debug.slow_input_s = 0.0  # the training input sleeps this long before each batch (a slow pipeline), on debug.slow_process; 0: off
  config.debug.slow_step_s = 0.0  # the host sleeps this long after each step (a slow host), on debug.slow_process; 0: off
  config.debug.slow_process = -1  # the process debug.slow_input_s and debug.slow_step_s slow (-1: every one)

  return config
