"""The table of bad configuration inputs: each case is a command line and a phrase its one error
message must contain. tests/config/test_bad_inputs.py checks them; scripts/gen_bad_inputs_doc.py
renders them, with the full messages, into docs/bad_inputs.md."""

from __future__ import annotations

import os
import pickle
from pathlib import Path

CONF = Path(__file__).resolve().parent.parent / "conf"

CASES: list[tuple[str, str]] = [
    # unknown names
    ("algorithm=fedavgg", "Did you mean 'fedavg'?"),
    ("dataset=fmnistt", "Unknown dataset 'fmnistt'"),
    ("partition=dirichlett", "Did you mean 'dirichlet'?"),
    ("model=cnnn", "Unknown model 'cnnn'"),
    ("experiment=fedadmm/table9", "Unknown experiment 'fedadmm/table9'"),
    # renamed choices (config/renames.py): the one line names the new name
    ("algorithm=fedadam", "algorithm=fedadam was renamed: use algorithm=fedavg/adam"),
    ("algorithm=scaffold_prox", "algorithm=scaffold_prox was renamed: use algorithm=scaffold/prox"),
    ("dataset=fmnist_fedadmm", "dataset=fmnist_fedadmm was renamed: use dataset=fedadmm/fmnist"),
    ("model=lenet", "model=lenet was renamed: use model=fedsso/lenet"),
    ("engine.executor=vmapp", "Unknown engine.executor 'vmapp'"),
    ("engine.dtype=float16", "Unknown engine.dtype 'float16'"),
    ("engine.device=tpu", "engine.device must be auto, cpu, cuda[:k] or mps"),
    ("aggregation=mean", "Unknown aggregation 'mean'"),
    ("loss_scale=avg", "Unknown loss_scale 'avg'"),
    ("tracking.objective=accuracy", "Unknown tracking.objective 'accuracy'"),
    ("+algorithm.mu=0.1", "Unknown parameter algorithm.mu for algorithm 'fedavg'"),
    ("algorithm.server_opt=adam algorithm.server_opt.tau=3", "algorithm=fedavg/adam algorithm.server_opt.tau=3"),
    ("+model.width=3", "Unknown parameter model.width for model 'mclr'"),
    ("+dataset.scale=2", "Unknown parameter dataset.scale for dataset 'digits'"),
    ("learning_rate=0.1", "Unknown top-level key 'learning_rate'"),
    ("roundz=5", "Unknown top-level key 'roundz'. Available: aggregation, algorithm"),
    # suggestions follow what users type (issue 41): aliases, a plain name before a paper's variant, a key one level down
    ("dataset=fashion_mnist", "Did you mean 'fmnist'?"),
    ("dataset=Fashion-MNIST", "Did you mean 'fmnist'?"),
    ("dataset=cifar-10", "Did you mean 'cifar10'?"),
    ("model=resnet18", "Did you mean 'resnet18_gn'?"),
    ("mu=0.1", "It is a key of algorithm=fedac, feddane, fedprox: choose one and set algorithm.mu."),
    ("algorithm=fedprox mu=0.1", "Did you mean 'algorithm.mu'?"),
    ("alpha=0.3", "Did you mean 'partition.alpha'?"),
    ("+option=I algorithm=scaffold", "Did you mean 'algorithm.option'?"),
    # sizes and counts
    ("rounds=0", "rounds must be an integer >= 1, got 0"),
    ("rounds=-5", "rounds must be an integer >= 1, got -5"),
    ("rounds=ten", "rounds must be an integer >= 1, got 'ten'"),
    ("num_clients=0", "num_clients must be an integer >= 1, got 0"),
    ("clients_per_round=0", "clients_per_round must be an integer >= 1, got 0"),
    ("clients_per_round=50", "clients_per_round=50 exceeds num_clients=20"),
    ("num_clients=5000 clients_per_round=10", "num_clients=5000 exceeds the 1437 training samples"),
    ("local_steps=5", "set exactly one of local_steps and local_epochs"),
    ("local_epochs=null", "set exactly one of local_steps and local_epochs"),
    ("local_steps=0 local_epochs=null", "local_steps must be an integer >= 1 or null, got 0"),
    ("local_epochs=0.5", "local_epochs must be an integer >= 1 or null, got 0.5"),
    ("batch_size=-1", "batch_size must be an integer >= 0, got -1"),
    ("eval_every=-1", "eval_every must be an integer >= 0, got -1"),
    ("seed=-1", "seed must be an integer in [0, 2**63 - 1], got -1"),
    ("engine.client_chunk=-2", "engine.client_chunk must be an integer >= 0, got -2"),
    ("tracking.checkpoint_every=-1", "tracking.checkpoint_every must be an integer >= 0, got -1"),
    # rates
    ("eta_l=0", "eta_l must be a finite number > 0, got 0"),
    ("eta_l=-0.1", "eta_l must be a finite number > 0, got -0.1"),
    ("eta_l=nan", "eta_l must be a finite number > 0, got nan"),
    ("eta_l=inf", "eta_l must be a finite number > 0, got inf"),
    ("eta_g=0", "eta_g must be a finite number > 0, got 0"),
    ("eta_l_decay=0", "eta_l_decay must be a finite number > 0, got 0"),
    ("eta_l=1e300", "eta_l=1e+300 is beyond float32's range (largest 3.403e+38), the run's engine.dtype; use a smaller "
                    "value, or engine.dtype=float64"),
    ("algorithm=fedprox algorithm.mu=1e39", "algorithm.mu=1e+39 is beyond float32's range (largest 3.403e+38)"),
    ("-m eta_l=0.1,1e300", "eta_l=1e+300 is beyond float32's range"),
    # partitions
    ("partition.alpha=0", "partition.alpha must be a finite number > 0"),
    ("partition.alpha=-1", "partition.alpha must be a finite number > 0"),
    ("partition.alpha=inf", "partition.alpha must be a finite number > 0 (large alpha approaches an IID split"),
    ("partition.min_size=100", "partition.min_size=100 x 20 clients exceeds 1437 samples"),
    ("partition=shards partition.shards_per_client=0", "partition.shards_per_client must be >= 1, got 0"),
    ("partition=shards partition.shards_per_client=100", "shards: 20 clients x 100 shards exceeds 1437 samples"),
    ("partition=natural", "partition=natural needs a data set with its own users"),
    ("dataset=synthetic partition=natural num_clients=10", "the data set has 30 users; set num_clients=30"),
    ("algorithm=fedadmm local_steps=5 local_epochs=null",
     "algorithm.hetero_epochs=true draws E_i from {1..local_epochs}, but local_epochs=null"),
    ("algorithm=fedadmm algorithm.rho_schedule=[0.1,60]",
     "algorithm.rho_schedule must be null or [round, value] with an integer round >= 0"),
    # an algorithm's coefficients, nested ones too: inf passed the algorithms' `>= 0` checks, and the run diverged
    ("algorithm=fedprox algorithm.mu=inf", "algorithm.mu must be a finite number, got inf"),
    ("algorithm=fedavg/adam algorithm.server_opt.tau=inf", "algorithm.server_opt.tau must be a finite number, got inf"),
    ("algorithm=fedadmm algorithm.rho_schedule=[1,inf]", "algorithm.rho_schedule[1] must be a finite number, got inf"),
    ("algorithm=fastfedda algorithm.regularizer.lam=inf", "algorithm.regularizer.lam must be a finite number, got inf"),
    ("algorithm=fedavg/adam algorithm.server_opt.tau=1e39", "algorithm.server_opt.tau=1e+39 is beyond float32's range"),
    # a negative matrix shape whose product is d: torch's traceback at the first prox step
    ("algorithm=scaffold algorithm.regularizer=nuclear algorithm.shape=[-65,-10] algorithm.lam=0.1",
     "the nuclear norm's matrix shape (rows, cols) must be two integers >= 1, got [-65, -10]"),
    # the shared local-step extras (core.types.LocalExtras)
    ("local_momentum=1", "local_momentum must be a finite number in [0, 1), got 1"),
    ("grad_clip=-1", "grad_clip must be a finite number >= 0, got -1"),
    ("algorithm=losac weight_decay=0.001", "weight_decay=0.001: algorithm losac has no local SGD step that takes it"),
    ("algorithm=fedspeed algorithm.weight_decay=0", "algorithm.weight_decay moved to the top level: use weight_decay=0"),
    ("algorithm=fedadmm algorithm.momentum=0.9", "algorithm.momentum moved to the top level: use local_momentum=0.9"),
    # targets and objectives
    ("targets=[1.5]", "targets[0] must be a finite number in (0, 1], got 1.5"),
    ("targets=[0]", "targets[0] must be a finite number in (0, 1], got 0"),
    ("targets=[-0.2,0.9]", "targets[0] must be a finite number in (0, 1], got -0.2"),
    ("tracking.objective=rounds_to_0.5", "tracking.objective=rounds_to_0.5 names a target not in targets"),
    ("stop_at_targets=true eval_every=0", "stop_at_targets=true needs targets to reach and a test evaluation"),
    # models that do not fit the data, data that is not there
    ("model=cnn dataset=synthetic partition=natural num_clients=30", "model 'cnn' does not fit data set 'synthetic'"),
    ("model=matrix dataset=digits", "model 'matrix' does not fit data set 'digits': it gives outputs of shape [1] per "
                                    "sample, where its 10 classes need [10]; models that fit it: cnn, composite/cnn,"),
    ("dataset=mnist data.root=/nonexistent/fedbench-data", "mnist not found: place train-images-idx3-ubyte[.gz]"),
    ("dataset=fmnist data.root=/nonexistent/fedbench-data hydra.run.dir=/etc/hostname/run",
     "cannot create the output folder /etc/hostname/run: /etc/hostname is a file"),
    # values that used to end in a traceback or be accepted silently (issue 21)
    ("seed=99999999999999999999", "seed must be an integer in [0, 2**63 - 1], got 99999999999999999999"),
    ("engine.threads=-1", "engine.threads must be an integer >= 0, got -1"),
    # the split's own seed (no partitioner's parameter): numpy's traceback at the split, after the run folder was made
    ("partition.seed=-1", "partition.seed must be an integer in [0, 2**63 - 1] or null (the split's own seed"),
    ("partition.seed=abc", "partition.seed must be an integer in [0, 2**63 - 1] or null (the split's own seed, fixed by "
                           "default so that runs of different seeds share it; null: the run's seed), got 'abc'"),
    ("engine.client_state_device=tpu", "engine.client_state_device must be auto (= engine.device), cpu, cuda[:k], mps or disk"),
    ("rounds=${oops}", "cannot resolve the config: Interpolation key 'oops' not found"),
    ("tracking.experiment=", "tracking.experiment must be the name of an MLflow experiment, got ''"),
    ("hydra.run.dir=", "hydra.run.dir='' would write the run's checkpoint and .hydra/ into the current folder"),
    # caught by the schema's one checker (issue 17): every key has a type, and a did-you-mean when unknown
    ("tracking.artifacts=3", "tracking.artifacts must be true or false, got 3"),
    ("data.download=maybe", "data.download must be true or false, got 'maybe'"),
    ("tracking.uri=5", "databricks or file:<folder> (with MLFLOW_ALLOW_FILE_STORE=true) or null, got 5"),
    ("tracking.uri=file:/tmp/mlruns", "tracking.uri='file:/tmp/mlruns' is MLflow's file store, which MLflow keeps in "
     "maintenance mode and refuses for new runs; use a database store"),
    ("tracking.uri=mlflow.db", "tracking.uri must be an MLflow tracking URI: sqlite:///<file> (sqlite:////<absolute file>), "
                               "http(s)://<server>, postgresql|mysql|mssql[+driver]://<database>, databricks or file:<folder> "
                               "(with MLFLOW_ALLOW_FILE_STORE=true) or null, got 'mlflow.db'"),
    ("tracking.uri=sqlite://m.db", "tracking.uri must be an MLflow tracking URI: sqlite:///<file>"),
    ("tracking.uri=ftp://alice:pw@host/m", "tracking.uri must be an MLflow tracking URI: sqlite:///<file> (sqlite:////<absolute "
                                           "file>), http(s)://<server>, postgresql|mysql|mssql[+driver]://<database>, "
                                           "databricks or file:<folder> (with MLFLOW_ALLOW_FILE_STORE=true) or null, got "
                                           "'ftp://alice:***@host/m'"),
    ("algorithm=fedprox algorithm.mu=abc", "algorithm.mu must be a number, got 'abc'"),
    ("model=mlp_2nn model.hidden=1.5", "model.hidden must be an integer >= 1 (a layer's width), got 1.5"),
    ("engine.exector=vmap", "Unknown key engine.exector. Valid: client_chunk, client_state_device, device, dtype, "
                            "executor, threads. Did you mean 'executor'?"),
    ("+tracking.objectiv=final_loss", "Unknown key tracking.objectiv. Valid: artifacts"),
    ("+model.zero_int=true", "Unknown parameter model.zero_int for model 'mclr'. Valid: zero_init. Did you mean 'zero_init'?"),
    ("model.width=3", "Unknown parameter model.width for model 'mclr'. Valid: zero_init."),
    ("dataset.test_fraction=0.3", "dataset.test_fraction is not in this config (its group's file does not set it): "
                                  "add it with +dataset.test_fraction=0.3"),
    ("+roundz=5", "Unknown top-level key 'roundz'. Available: aggregation, algorithm"),
    # sweeps: a bad value in any job stops the grid before the first job
    ("-m eta_l=0.1,0.05,-1", "eta_l must be a finite number > 0, got -1"),
    ("-m algorithm=fedavg,fedsdg", "Did you mean 'fedsgd'?"),
    # issue 35 (populations made on demand)
    ("dataset=synthetic partition=natural dataset.generator=sequential dataset.num_users=1000000 num_clients=1000000",
     "dataset.num_users=1000000 with dataset.generator=sequential holds every user's data in memory"),
    ("dataset=synthetic partition=natural dataset.generator=lazy", "dataset.generator='lazy': choose one of auto, sequential, per_user"),
    ("dataset=synthetic dataset.generator=per_user partition=iid",
     "partition=iid: dataset.generator=per_user makes each user's data when it is sampled, so only partition=natural"),
    ("dataset=synthetic dataset.generator=per_user partition=natural num_clients=30 train_loss_every=1",
     "train_loss_every=1: the full training loss needs every user's data"),
    ("dataset=synthetic partition=natural dataset.eval_users=-1", "dataset.eval_users must be >= 0 (0 = every user), got -1"),
    # issue 42 (what a command needs is checked before it starts)
    ("dataset=synthetic partition=natural dataset.num_users=100000000000 num_clients=100000000000",
     "dataset.num_users=100000000000 with dataset.eval_users=1000 holds each user's size and weight"),
    # issue 32 (signals and one-line errors): Hydra's own settings, composed with the first job
    ("-m hydra/launcher=foo seed=0,1", "Unknown hydra/launcher 'foo'. Available: basic, batched"),
    ("-m hydra/sweeper=foo seed=0,1", "Unknown hydra/sweeper 'foo'. Available: basic"),
    ("-m hydra/launcher=batched hydra.launcher.max_batch=abc seed=0,1",
     "hydra.launcher.max_batch must be an integer >= 0 (0: as many as fit in half the free memory), got 'abc'"),
    ("-m hydra/launcher=batched hydra.launcher.max_batch=-1 seed=0,1",
     "hydra.launcher.max_batch must be an integer >= 0 (0: as many as fit in half the free memory), got -1"),
    ("-m hydra/launcher=batched hydra.launcher.maxbatch=2 seed=0,1",
     "Unknown key hydra.launcher.maxbatch. Valid: max_batch. Did you mean 'max_batch'?"),
    ("hydra.job.chdr=true", "Unknown key hydra.job.chdr. Valid: chdir, config"),
    ("hydra.foo=1", "Unknown key hydra.foo. Valid: callbacks, env"),
    ("seed=0,1", "seed=0,1 is a grid of values: add -m to run a grid"),
    ("algorithm=fedavg,fedprox", "algorithm=fedavg,fedprox is a grid of values: add -m to run a grid"),
    ("rounds=[1,", "cannot parse the overrides: no viable alternative at input '[1,'"),
    ("-m eta_l=choice()", "cannot parse the overrides: Error parsing override 'eta_l=choice()'; ValueError while "
                          "evaluating 'choice()': empty choice is not legal"),  # was three lines
    ("tracking.run_name=café", "a value with characters beyond ASCII is taken quoted: tracking.run_name='café'"),
    # a group set to null: "Config group override must be a string or a list. Got NoneType"
    ("experiment=null", "experiment=null: a config group is chosen by name, and null names none; leave experiment out "
                        "for its default, or choose one of: composite/fig2,"),
    ("engine=null", "engine=null: a config group is chosen by name, and null names none; leave engine out for its "
                    "default, or choose one of: default"),
    ("-m seed=range(0,100001)", "a grid of 100,001 jobs (seed (100,001)); at most 100,000 are run from one command line"),
    ("-m seed=range(0,100000000)", "a grid of 100,000,000 jobs (seed (100,000,000)); at most 100,000"),
    ("-m seed=range(0,1000) algorithm=fedavg,fedprox eta_l=range(0.001,0.1,0.001)",
     "a grid of 198,000 jobs (seed (1,000) x algorithm (2) x eta_l (99))"),
    # values the machine, the data set or the store cannot take
    ("engine.threads=100000", "engine.threads=100000 is more than this machine's CPU cores"),
    ("data.binary_classes=[99]", "data.binary_classes=[99]: 99 not a class; digits has the 10 classes 0..9"),
    ("data.binary_classes=[0,1,2,3,4,5,6,7,8,9]", "names every class, a task with one label"),
    ("tracking.experiment=" + "e" * 300, "tracking.experiment must be at most 256 characters"),
    ("tracking.run_name=" + "r" * 300, "tracking.run_name must be at most 250 characters"),
    ("-m eta_l=interval(0.01,1)", "eta_l=interval(0.01,1) is an interval to search, which a grid cannot list: give "
                                  "values (choice(...), range(...) or a,b,c), or search it with hydra/sweeper=optuna"),
    ("-m seed=range(3,3)", "seed=range(3,3) lists no value: the grid has no job"),
    ("-m seed=range(0,10,0)", "seed=range(0,10,0): a range's step must not be 0"),
    # glob sweeps (HydraException "ConfigLoader is not set" traceback; Hydra then ran a grid of no job)
    ("-m seed=glob(*)", "seed=glob(*): glob() selects among a config group's options"),
    ("-m algorithm=glob(fedavg/a*)", "algorithm=glob(fedavg/a*) selects none of algorithm's options (dsgd, fastfedda,"),
    ("-m algorithm=glob(feds*) eta_l=0.1,-1", "eta_l must be a finite number > 0, got -1"),
    ("hydra.run.dir=${oc.env:FEDBENCH_NO_SUCH_VARIABLE}", "cannot resolve hydra.run.dir: KeyError raised while "
                                                          "resolving interpolation: \"Environment variable"),
    ("hydra.run.dir=outputs/${no_such_key}", "cannot resolve hydra.run.dir: Interpolation key 'no_such_key' not found"),
    ("-m seed=0,1 hydra.sweep.dir=outputs/${hydra.job.num}", "hydra.sweep.dir cannot use ${hydra.job.num}: the "
                                                              "sweep's folder is made before its jobs"),
    ("hydra.job.name=a/b", "hydra.job.name='a/b' must be a file name"),
    ("partition=pfl_noniid partition.least_samples=100000", "pfl_noniid: partition.least_samples=100000 is not below the"),
    ("dataset=synthetic partition=natural num_clients=30 dataset.alpha=-1", "dataset.alpha must be a finite number >= 0"),
    ("dataset=synthetic partition=natural num_clients=30 dataset.beta=-0.5", "dataset.beta must be a finite number >= 0"),
    ("--resolve", "--resolve goes with --cfg or --help"),
    ("-m eta_l=range(0.1,0.2,0)", "eta_l=range(0.1,0.2,0): a range's step must not be 0"),
    # each job of a sweep in a folder of its own inside the sweep's (an interrupted run's checkpoint was overwritten)
    ("-m seed=0,1 hydra.sweep.subdir=../victim_run", "hydra.sweep.subdir='../victim_run' leaves the sweep folder"),
    ("-m seed=0,1 hydra.sweep.subdir=/tmp/elsewhere", "hydra.sweep.subdir='/tmp/elsewhere' leaves the sweep folder"),
    ("-m seed=0,1 hydra.sweep.subdir=.", "hydra.sweep.subdir='.' names one folder for every job of the sweep"),
    # integers beyond 64 bits (the tensors' int64), numbers beyond a float
    ("batch_size=100000000000000000000", "batch_size must be an integer >= 0, got 100000000000000000000: beyond what a "
                                         "run holds (an integer: at most 2**63 - 1"),
    ("rounds=100000000000000000000000000000", "rounds must be an integer >= 1, got 100000000000000000000000000000"),
    ("local_epochs=1000000000000000000000", "local_epochs must be an integer >= 1 or null, got 1000000000000000000000"),
    ("eta_l=1" + "0" * 400, "eta_l must be a finite number > 0, got 1.000e+400: beyond what a run holds"),
    # devices this machine lacks (tests/models run the CUDA ones where a device is)
    ("engine.device=mps", "engine.device=mps but no MPS device is available; use engine.device=auto"),
    ("engine.client_state_device=mps", "engine.client_state_device=mps but no MPS device is available"),
    ("--config-name mine", "--config-name is not a flag of fedbench run: its primary config is fedbench's own"),
    ("hydra.run.dir=" + "d" * 300, "cannot create the output folder " + "d" * 300 + ": File name too long; set hydra.run.dir"),
    # issue 36 (fedadmm)
    ("algorithm=fedprox algorithm.hetero_epochs=true local_steps=5 local_epochs=null",
     "algorithm.hetero_epochs=true draws E_i from {1..local_epochs}, but local_epochs=null"),
    ("algorithm=fedadmm algorithm.chained=true algorithm.local_init=local",
     "algorithm.chained=true starts each client from the previous client's result"),
    # generators' parameters, sizes and rates that were accepted silently or ended in a library's traceback
    ("dataset=make_classification dataset.n_samples=0", "dataset.n_samples must be an integer >= 1, got 0"),
    ("dataset=make_classification dataset.n_informative=0", "dataset.n_informative must be an integer >= 1, got 0"),
    ("dataset=make_classification dataset.flip_y=1.5", "dataset.flip_y must be a finite number in [0, 1] (the share "
                                                       "of labels drawn at random), got 1.5"),
    ("dataset=make_classification dataset.class_sep=-1", "dataset.class_sep must be a finite number > 0"),
    ("dataset=make_classification dataset.n_informative=100", "dataset.n_informative=100 + dataset.n_redundant=5 is "
                                                              "more than dataset.n_features=40"),
    ("dataset=make_classification dataset.n_informative=2", "dataset.n_classes=10 x dataset.n_clusters_per_class=2 "
                                                            "clusters are more than the 2**2 = 4 corners"),
    ("dataset=make_classification dataset.n_classes=1", "dataset.n_classes must be an integer >= 2 (a task of one "
                                                        "class has nothing to learn), got 1"),
    ("dataset=synthetic partition=natural num_clients=30 +dataset.num_classes=1",
     "dataset.num_classes must be an integer >= 2"),
    ("dataset=lstsq partition=natural num_clients=8 clients_per_round=4 model=linear dataset.size_growth=0",
     "dataset.size_growth must be a finite number > 0 (client k holds samples_per_user * size_growth**k samples), got 0"),
    ("dataset=lstsq partition=natural num_clients=8 clients_per_round=4 model=linear dataset.size_growth=100",
     "dataset.size_growth=100: the 8 users hold 2.02e+15 samples"),
    ("eta_l=1e-320", "eta_l=1e-320 is below float32's smallest normal number (1.175e-38), the run's engine.dtype"),
    ("engine.dtype=float64 eta_l=1e-320", "eta_l=1e-320 is below float64's smallest normal number (2.225e-308)"),
    ("partition.min_size=-5", "partition.min_size must be an integer >= 0 (the fewest samples a client may hold), got -5"),
    ("model=mlp_2nn model.hidden=0", "model.hidden must be an integer >= 1 (a layer's width), got 0"),
    ("hydra.output_subdir=../x", "hydra.output_subdir='../x': fedbench keeps a run's record in its folder's .hydra/ "
                                 "(fedbench resume reads it there); use hydra.output_subdir=.hydra (the default)"),
    # Hydra's flags, as its parser reads them (it printed its usage, eight lines)
    ("--foo", "fedbench run: unrecognized arguments: --foo. Its flags: --cfg, --config-dir, --help, --hydra-help"),
    ("--multirn", "Did you mean '--multirun'?"),
    ("--cfg nope", "fedbench run: argument --cfg/-c: invalid choice: 'nope' (choose from 'job', 'hydra', 'all')"),
]


def diagnose(line: str, conf: Path | None = CONF) -> str:
    """The one-line message of a command line's first error ('' when it has none): the CLI's
    preflight over every job, then building the run (data, partition, model) as run_job does."""
    from hydra import compose, initialize_config_dir

    from fedbench.runs.build import build_federation
    from fedbench.core.errors import FedbenchError
    from fedbench.config.preflight import preflight

    argv = ["--multirun" if a == "-m" else a for a in line.split()]
    try:
        if conf is None:  # as `fedbench run` finds it (FEDBENCH_CONF)
            from fedbench.config.compose import checked_conf_dir

            conf = checked_conf_dir()
        preflight(conf, argv)
        with initialize_config_dir(config_dir=str(conf), version_base=None):
            cfg = compose("config", overrides=[a for a in argv if not a.startswith(("-", "hydra."))])
        build_federation(cfg)
    except FedbenchError as exc:
        return str(exc)
    return ""


# Other commands, and inputs that need files: full command lines of the real CLI, run in-process.
# {tmp} is a folder that make_fixtures fills (shown as <tmp> in docs/bad_inputs.md); `run` lines are
# diagnosed as above (preflight, then building the data), the others by calling the command.
COMMAND_CASES: list[tuple[str, str]] = [
    ("run dataset=fmnist data.root={tmp}/labels_out_of_range", "labels range over 0..12; fmnist has the 10 classes 0..9"),
    ("run dataset=fmnist data.root={tmp}/images_14x56", "fmnist images must have shape nx28x28, got 50x14x56"),
    ("report --best-by accuracy", "Unknown --best-by 'accuracy'. Available: best_accuracy, final_accuracy, final_loss, rounds_to_<t>."),
    ("report --uri sqlite:///{tmp}/store.db --filter 'tags.foo =='", "--filter 'tags.foo ==' is not a valid MLflow search filter"),
    ("report --output {tmp}/garbage.db/x.md", "--output <tmp>/garbage.db/x.md: <tmp>/garbage.db is a file, not a folder"),
    ("report --uri sqlite:///{tmp}/garbage.db", "<tmp>/garbage.db is not an MLflow store (not an SQLite database"),
    ("report --uri sqlite:///{tmp}/empty.db", "<tmp>/empty.db is not an MLflow store (it has no alembic_version"),
    ("report --uri 'postgresql://u:p@h:port/db'", "the store URI postgresql://u:***@h:port/db is not one SQLAlchemy can read"),
    ("report --uri sqlite:///{tmp}/store.db --target 0.5 --baseline fedavgg", "Did you mean 'fedavg'?"),
    ("data show --out /nonexistent/x.png", "--out /nonexistent/x.png: the folder /nonexistent does not exist"),
    ("data show --rows -5", "--rows must be >= 0 (0 lists every client), got -5"),
    ("data show --style pie", "Unknown --style 'pie'. Available: bars, heatmap."),
    ("data show --out {tmp}/split.txt", "--out <tmp>/split.txt: matplotlib writes no .txt figure; end the name in a format "
     "it writes, e.g. .png, .pdf or .svg"),  # matplotlib's traceback after the split was made and its table printed
    ("plot --x epoch", "Unknown --x 'epoch'. Available: floats_down, floats_up, round, wall_time."),
    ("plot --uri sqlite:///{tmp}/store.db --metric acc --output {tmp}/p", "Unknown --metric (a metric these runs logged) 'acc'"),
    ("attack dlg --algorithms ''", "--algorithms names no algorithm (got '')"),
    ("attack dlg --attack-lr nan", "--attack-lr must be a finite number > 0, got nan"),
    ("attack dlg --round 99999999999999999999", "--round and --iterations must be integers in [1, 2**63 - 1], got "
                                                "99999999999999999999 and 100"),
    ("attack dlg --out {tmp}/outside.txt", "cannot create a folder in --out <tmp>/outside.txt: File exists; set --out"),
    ("plot --output figs/..", "--output 'figs/..' names no file: give a path and a name"),
    # a name longer than the file system takes: the output checks ended in OSError's traceback
    ("plot --uri sqlite:///{tmp}/store.db --output {tmp}/" + "x" * 300, "x.png: File name too long; choose another path"),
    ("report --output {tmp}/" + "x" * 300 + "/table.md", "x/table.md: File name too long; choose another path"),
    # issue 32 (security)
    ("run dataset=cifar10 data.root={tmp}/cifar_crafted",
     "cifar-10-batches-py/data_batch_1 is not a CIFAR python batch: it references posix.mknod, which a CIFAR batch never holds"),
    # issue 33 (report and plot options)
    ("report --uri sqlite:///{tmp}/store.db --setting nope", "Unknown --setting 'nope': no run records it"),
    ("report --uri sqlite:///{tmp}/store.db --baseline fedavg", "--baseline fedavg is the speed-up in rounds to a target: give --target too"),
    ("plot --uri sqlite:///{tmp}/store.db --setting nope --output {tmp}/p", "Unknown --setting 'nope': no run records it"),
    # issue 32 (run ownership): a new run never overwrites the checkpoint an interrupted run resumes from
    ("run hydra.run.dir={tmp}/interrupted_run", "<tmp>/interrupted_run holds the checkpoint of an earlier run "
     "(<tmp>/interrupted_run/checkpoint.pt); continue it with: fedbench resume <tmp>/interrupted_run"),
    # issue 32 (signals and one-line errors): files a run reads, stores a reader opens
    ("run --config-dir {tmp}/conf_dir_bad_yaml algorithm=mine",
     "malformed YAML in <tmp>/conf_dir_bad_yaml/algorithm/mine.yaml, line 2, column 7: mapping values are not allowed"),
    ("FEDBENCH_CONF={tmp}/conf_bad_yaml run rounds=1",
     "malformed YAML in <tmp>/conf_bad_yaml/config.yaml, line"),
    ("run --config-dir {tmp}/conf_dir_bare_value algorithm=mine",  # was OmegaConf's OSError traceback, exit 1
     "<tmp>/conf_dir_bare_value/algorithm/mine.yaml holds a bare value (int), not a mapping of keys"),
    ("FEDBENCH_CONF={tmp}/nowhere run rounds=1", "no config.yaml in the config directory <tmp>/nowhere (from FEDBENCH_CONF)"),
    ("resume {tmp}/run_checkpoint_empty", "checkpoint.pt is not a readable checkpoint"),
    ("run hydra.run.dir={tmp}/link_loop/run", "cannot create the output folder <tmp>/link_loop/run: Symlink loop from"),
    ("report --output /proc/version", "--output /proc/version: cannot write to /proc:"),
    ("resume {tmp}/run_checkpoint_not_a_dict", "checkpoint.pt is not a fedbench checkpoint (it holds a list)"),
    ("resume {tmp}/run_checkpoint_old_layout", "checkpoint.pt does not match this run (missing history, tables)"),
    ("resume {tmp}/run_checkpoint_wrong_types", "checkpoint.pt does not match this run (round is a str)"),
    ("resume {tmp}/run_checkpoint_wrong_shapes", "checkpoint.pt does not match this run (server state x of shape [3]"),
    ("resume {tmp}/run_checkpoint_round_beyond", "checkpoint.pt does not match this run (round 4611686018427387904, "
                                                 "beyond the run's rounds=3)"),
    ("report --uri sqlite:///{tmp}/typo.db", "no MLflow store at <tmp>/typo.db"),
    ("report --uri {tmp}/no_such_folder", "no MLflow store at <tmp>/no_such_folder"),
    ("plot --uri sqlite:///{tmp}/typo.db --output {tmp}/p", "no MLflow store at <tmp>/typo.db"),
    # issue 42 (every reader of a user's file ends in one line naming it, with bounded resources)
    ("run dataset=mnist data.root={tmp}/idx_255_dims",
     "mnist/train-images-idx3-ubyte is not an IDX file: the header declares 255 dimensions; this file must have 3"),
    ("run dataset=mnist data.root={tmp}/idx_gzip_bomb",
     "is not an IDX file: the header says (50, 28, 28) (39,200 bytes of data), the file holds more"),
    ("run dataset=mnist data.root={tmp}/idx_float_labels", "train-labels-idx1-ubyte is not an IDX file of mnist labels: "
     "labels must be whole numbers, got 1.5"),
    ("run dataset=mnist data.root={tmp}/idx_nan_pixels", "train-images-idx3-ubyte is not an IDX file of mnist images: "
     "pixels hold 1 non-finite value (the first, nan"),
    ("run dataset=cifar10 data.root={tmp}/cifar_nested_labels", "data_batch_1 is not a CIFAR python batch: its values "
     "expand to more than"),
    ("run dataset=cifar10 data.root={tmp}/cifar_build_on_a_function", "data_batch_1 is not a CIFAR python batch: it sets "
     "the state of a function (BUILD)"),
    ("run dataset=shakespeare dataset.source=leaf data.root={tmp}/leaf_list_at_the_top",
     "t.json is not a LEAF JSON file: the top level must be a dict, got list"),
    ("run dataset=shakespeare dataset.source=leaf data.root={tmp}/leaf_deep", "t.json is not a LEAF JSON file: RecursionError"),
    ("run dataset=esr data.root={tmp}/esr_float_labels", "is not the Epileptic Seizure Recognition CSV (columns X1..X178 "
     "and y): the labels y must be whole numbers, got 2.5"),
    # issue 42 (the run folder's own files): opened as what they must be, refused before Hydra writes
    ("run hydra.run.dir={tmp}/lock_symlink", "<tmp>/lock_symlink/.fedbench.lock is a symlink (to <tmp>/outside.txt)"),
    ("run hydra.run.dir={tmp}/lock_fifo", "<tmp>/lock_fifo/.fedbench.lock is a FIFO"),
    ("run hydra.run.dir={tmp}/lock_folder", "<tmp>/lock_folder/.fedbench.lock is a folder"),
    ("run hydra.run.dir={tmp}/log_symlink", "<tmp>/log_symlink/hydra_app.log is a symlink (to <tmp>/outside.txt)"),
    ("run hydra.run.dir={tmp}/log_hardlink", "<tmp>/log_hardlink/hydra_app.log is a file with 2 hard links"),
    ("run hydra.run.dir={tmp}/record_symlink", "<tmp>/record_symlink/.hydra/hydra.yaml is a symlink"),
    ("run hydra.run.dir={tmp}/dangling", "<tmp>/dangling is a symlink to <tmp>/nowhere, which does not exist"),
    # root passes os.access in /proc (exit 1 at the run's start); anyone else: not writable
    ("run hydra.run.dir=/proc/fedbench_run", "cannot create the output folder /proc/fedbench_run: /proc "),
    ("run hydra.run.dir=outputs/..", "hydra.run.dir='outputs/..' is the current folder"),
    ("resume {tmp}/record_changed", "<tmp>/record_changed/.hydra/overrides.yaml (or fedbench.yaml) is not the record "
     "this user's fedbench wrote with its checkpoint"),
    ("resume {tmp}/disk_table_truncated", "<tmp>/disk_table_truncated/client_state is not the client state of this "
     "run's checkpoint (c.bin holds"),
    # issue 40 (a reproduction's seeds): the keys a reproduction sets per job are refused, the seeds chosen with --seeds
    ("reproduce losac/fig6 --scale ci seed=5", "seed=5: a reproduction sets seed per job (choose a reproduction's seeds with --seeds"),
    ("reproduce losac/fig6 tracking.run_name=mine", "tracking.run_name=mine: a reproduction sets tracking.run_name per job"),
    ("reproduce losac/fig6 --seeds 3-1", "--seeds '3-1': expected seeds >= 0 as a range, a list or both"),
    ("reproduce losac/fig6 --seeds 0-100000000", "--seeds '0-100000000': 100,000,001 seeds; a reproduction runs at most 100,000 jobs"),
    ("reproduce losac/fig6 --seeds 0-99999999999999999999999", "--seeds '0-99999999999999999999999': a seed is at most "
     "2**63 - 1 (a run's seed), got 99999999999999999999999"),  # OverflowError's traceback (len of the range)
    ("reproduce composite/fig2 --scale full --seeds 0-9999", "composite/fig2: 88 arms x 10,000 seeds = 880,000 jobs; a reproduction runs at most 100,000"),
    # Click's usage errors, one line (Typer boxed them under the command's usage)
    ("report --format pdf", "Invalid value for '--format': 'pdf' is not one of 'markdown', 'csv', 'latex', 'html'. "
                            "(see fedbench report --help)"),
    ("rn", "No such command 'rn'. Did you mean 'run'? (see fedbench --help)"),  # Typer and Click both suggested it
    ("reproduce X --jobs 0", "Invalid value for '--jobs': 0 is not in the range x>=1. (see fedbench reproduce --help)"),
    ("reproduce list --record", "--record records a reproduction's outcome: give an entry (fedbench reproduce list) or `all`"),
    # a command's output files (reports, figures, a reproduction's summary) in a shared folder: never through a link
    ("report --format html", "--output outputs/report.html is a symlink (to <tmp>/outside.txt), where fedbench writes "
     "its output; fedbench neither follows nor replaces it"),
    ("report --output {tmp}/shared/table.md", "--output <tmp>/shared/table.md is a FIFO, where fedbench writes its output"),
    ("plot --uri sqlite:///{tmp}/store.db --output {tmp}/shared/curves", "--output <tmp>/shared/curves.pdf is a symlink "
     "(to <tmp>/outside.txt)"),
    ("data show --out {tmp}/shared/split.png", "--out <tmp>/shared/split.png is a file with 2 hard links"),
    ("run dataset=fmnist data.root={tmp}/idx_fifo", "<tmp>/idx_fifo/fmnist/t10k-labels-idx1-ubyte is a FIFO, not a data "
     "file: put the file there (or a link to it), or remove it"),
    ("FEDBENCH_CONF={tmp}/conf_fifo run mu=0.1", "<tmp>/conf_fifo/algorithm/mine.yaml is a FIFO, not a config file"),
    ("report --uri sqlite:///{tmp}/shared/fifo.db", "<tmp>/shared/fifo.db is a FIFO, not an MLflow store"),
    ("reproduce fedsso/table2 --seeds 0", "outputs/reproduce/fedsso/table2/ci/page.html is a symlink (to <tmp>/outside.txt), "
     "where fedbench writes its output; fedbench neither follows nor replaces it: remove it"),
    # files and stores received from someone else: read with bounded work, nothing they define is run
    ("run --config-dir {tmp}/conf_dir_alias_bomb algorithm=mine", "malformed YAML in <tmp>/conf_dir_alias_bomb/algorithm/"
     "mine.yaml, line 7, column 5: its values expand to more than 100,000"),
    ("resume {tmp}/record_alias_bomb", "<tmp>/record_alias_bomb/.hydra/overrides.yaml is not the run's YAML record "
     "(ComposerError: its values expand to more than 100,000"),
    ("report --uri sqlite:///{tmp}/store_with_a_view.db", "<tmp>/store_with_a_view.db is not an MLflow store as MLflow "
     "writes one: it defines the view latest_metrics"),
    ("run dataset=libsvm dataset.path={tmp}/libsvm_label_of_one_row.svm", "the label 7 has one row (1 of its 3 labels "
     "do), and a stratified split (dataset.test_fraction) needs two of each"),
    ("run dataset=tinyimagenet data.root={tmp}/tiny_npz_bomb", "x_train declares uint8 [400000, 64, 64, 3], "
     "4,915,200,000 bytes; the format's holds at most 1,228,800,000"),
]


def make_fixtures(tmp: Path) -> None:
    """The files COMMAND_CASES refer to: small IDX files in the original format, an MLflow store
    with one finished run, a file that is not a database."""
    (tmp / "link_loop").symlink_to(tmp / "link_loop_back")  # two links that name each other
    (tmp / "link_loop_back").symlink_to(tmp / "link_loop")
    import numpy as np
    from mlflow.tracking import MlflowClient

    from tests.data.test_data import write_idx, write_mnist_like

    for name, change in (("labels_out_of_range", "labels"), ("images_14x56", "images")):
        folder = tmp / name / "fmnist"
        write_mnist_like(folder)
        if change == "labels":
            write_idx(folder / "train-labels-idx1-ubyte", np.arange(50, dtype=np.uint8) % 13, False)
        else:
            write_idx(folder / "train-images-idx3-ubyte", np.zeros((50, 14, 56), np.uint8), False)
    (tmp / "garbage.db").write_bytes(bytes(range(256)) * 64)
    (tmp / "empty.db").touch()  # a reader never turns it into a store
    uri = f"sqlite:///{tmp}/store.db"
    client = MlflowClient(uri)
    run = client.create_run(client.create_experiment("fedbench"))
    for key, value in (("algorithm.name", "fedavg"), ("seed", "0"), ("rounds", "3"), ("dataset.name", "digits"),
                       ("partition.name", "iid")):
        client.log_param(run.info.run_id, key, value)
    client.set_tag(run.info.run_id, "rounds_to_0.5", "2")
    client.log_metric(run.info.run_id, "test_accuracy", 0.6, step=3)
    client.set_terminated(run.info.run_id)
    # issue 32 (security): CIFAR batches whose first would create a file when unpickled
    from tests.data.test_safe_loading import Marker, cifar_folder

    cifar_folder(tmp / "cifar_crafted", crafted=pickle.dumps(Marker(tmp / "cifar_crafted" / "marker"), protocol=2))
    # issue 32 (run ownership): a run folder with a checkpoint (its content is not read before the refusal)
    (tmp / "interrupted_run").mkdir()
    (tmp / "interrupted_run" / "checkpoint.pt").write_bytes(b"")
    make_issue32_fixtures(tmp)
    make_issue42_fixtures(tmp)
    make_issue42_folder_fixtures(tmp)
    make_output_fixtures(tmp)
    make_received_fixtures(tmp)


def make_received_fixtures(tmp: Path) -> None:
    """Files and stores received from someone else: a config folder's and a run record's YAML alias bomb, a store
    with a recursive view in place of MLflow's table, a LIBSVM label of one row, an .npz declaring 4.9 GB."""
    import io
    import shutil
    import sqlite3
    import zipfile

    import numpy as np

    from tests.core.test_user_yaml import alias_bomb

    (tmp / "conf_dir_alias_bomb" / "algorithm").mkdir(parents=True)
    (tmp / "conf_dir_alias_bomb" / "algorithm" / "mine.yaml").write_text("name: fedavg\n" + alias_bomb())
    (tmp / "record_alias_bomb" / ".hydra").mkdir(parents=True)
    (tmp / "record_alias_bomb" / ".hydra" / "overrides.yaml").write_text(alias_bomb(top_list=True))
    (tmp / "record_alias_bomb" / "checkpoint.pt").write_bytes(b"")  # not read: the record is refused first
    shutil.copy(tmp / "store.db", tmp / "store_with_a_view.db")
    con = sqlite3.connect(tmp / "store_with_a_view.db")
    con.executescript("ALTER TABLE latest_metrics RENAME TO kept; CREATE VIEW latest_metrics AS WITH RECURSIVE c(x) AS "
                      "(SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT k.key, k.value, k.timestamp, k.step, k.is_nan, "
                      "k.run_uuid FROM kept k, c")
    con.close()
    (tmp / "libsvm_label_of_one_row.svm").write_text("1 1:1\n-1 2:1\n" * 10 + "7 1:1\n")
    folder = tmp / "tiny_npz_bomb" / "tinyimagenet"
    folder.mkdir(parents=True)
    (folder / "wnids.txt").write_text("n0\n")
    with zipfile.ZipFile(folder / "fedbench_cache.npz", "w") as z:  # headers only: the data is never reached
        for key, shape, dtype in (("x_train", (400_000, 64, 64, 3), "|u1"), ("y_train", (2,), "<i8"),
                                  ("x_test", (2, 64, 64, 3), "|u1"), ("y_test", (2,), "<i8")):
            header = io.BytesIO()
            np.lib.format.write_array_header_1_0(header, {"descr": dtype, "fortran_order": False, "shape": shape})
            z.writestr(f"{key}.npy", header.getvalue() + bytes(64))


def make_output_fixtures(tmp: Path) -> None:
    """Where commands write their output (the current folder's outputs/, a folder given as --output): a link to a
    file outside, a FIFO, a hard-linked file."""
    outside = tmp / "outside.txt"
    outside.touch()
    shared = tmp / "shared"
    shared.mkdir()
    (tmp / "outputs").mkdir(exist_ok=True)
    (tmp / "outputs" / "report.html").symlink_to(outside)
    os.mkfifo(shared / "table.md")
    os.mkfifo(shared / "fifo.db")  # SQLite opened it and blocked on it forever
    (shared / "curves.pdf").symlink_to(outside)
    (shared / "elsewhere.png").touch()
    os.link(shared / "elsewhere.png", shared / "split.png")
    from tests.data.test_data import write_mnist_like

    import shutil

    shutil.copytree(CONF, tmp / "conf_fifo")  # a config folder with a FIFO for a file: `run mu=0.1` read it forever
    os.mkfifo(tmp / "conf_fifo" / "algorithm" / "mine.yaml")
    write_mnist_like(tmp / "idx_fifo" / "fmnist")  # one of its files a FIFO: named, not read past to Debian's copy
    (tmp / "idx_fifo" / "fmnist" / "t10k-labels-idx1-ubyte").unlink()
    os.mkfifo(tmp / "idx_fifo" / "fmnist" / "t10k-labels-idx1-ubyte")
    entry = tmp / "outputs" / "reproduce" / "fedsso" / "table2" / "ci"
    entry.mkdir(parents=True)
    (entry / "page.html").symlink_to(outside)


def make_issue42_fixtures(tmp: Path) -> None:
    """Crafted data files (issue 42 §4), each in its own data.root."""
    import gzip

    import numpy as np

    from tests.data.test_data import write_idx, write_mnist_like
    from tests.data.test_hostile_files import IDX_CASES, batch_with_labels, idx_header, leaf_root, nested_labels, write_esr
    from tests.data.test_safe_loading import cifar_folder

    for name in ("idx_255_dims", "idx_gzip_bomb", "idx_float_labels", "idx_nan_pixels"):
        write_mnist_like(tmp / name / "mnist")
    (tmp / "idx_255_dims" / "mnist" / "train-images-idx3-ubyte").write_bytes(IDX_CASES["255_dims"][0])
    (tmp / "idx_gzip_bomb" / "mnist" / "train-images-idx3-ubyte").write_bytes(
        gzip.compress(idx_header(0x08, (50, 28, 28)) + bytes(50 * 2**20)))  # 50 MB in 50 kB
    write_idx(tmp / "idx_float_labels" / "mnist" / "train-labels-idx1-ubyte", np.full(50, 1.5, np.float32), False)
    images = np.zeros((50, 28, 28), np.float32)
    images[0, 0, 0] = np.nan
    write_idx(tmp / "idx_nan_pixels" / "mnist" / "train-images-idx3-ubyte", images, False)
    cifar_folder(tmp / "cifar_nested_labels", crafted=batch_with_labels(nested_labels(31)))
    state = b"N}X\x0c\x00\x00\x00__defaults__X\x05\x00\x00\x00rot13\x85s\x86"
    cifar_folder(tmp / "cifar_build_on_a_function", crafted=batch_with_labels(b"c_codecs\nencode\n" + state + b"b"))
    leaf_root(tmp / "leaf_list_at_the_top", [1, 2])
    leaf_root(tmp / "leaf_deep", "[" * 100_000 + "]" * 100_000)
    write_esr(tmp / "esr_float_labels" / "esr", y="2.5")


def make_issue42_folder_fixtures(tmp: Path) -> None:
    """Run folders whose own files are links, a FIFO, a folder, a hard link; a dangling link as the run folder;
    a run's record changed after its checkpoint; a disk client table cut short."""
    import torch
    from omegaconf import OmegaConf

    from fedbench.engine.checkpoint import save_checkpoint
    from fedbench.engine.loop import initial_state, run_round
    from fedbench.runs.build import build_federation
    from fedbench.runs.recorded import digest
    from fedbench.runs.single import config_hash
    from tests.conftest import make_cfg

    outside = tmp / "outside.txt"
    outside.write_text("the user's file\n")
    for name in ("lock_symlink", "lock_fifo", "lock_folder", "log_symlink", "log_hardlink", "record_symlink"):
        (tmp / name).mkdir()
    (tmp / "lock_symlink" / ".fedbench.lock").symlink_to(outside)
    os.mkfifo(tmp / "lock_fifo" / ".fedbench.lock")
    (tmp / "lock_folder" / ".fedbench.lock").mkdir()
    (tmp / "log_symlink" / "hydra_app.log").symlink_to(outside)
    os.link(outside, tmp / "log_hardlink" / "hydra_app.log")
    (tmp / "record_symlink" / ".hydra").mkdir()
    (tmp / "record_symlink" / ".hydra" / "hydra.yaml").symlink_to(outside)
    (tmp / "dangling").symlink_to(tmp / "nowhere")

    cfg = make_cfg(*RESUMED)
    fed, _ = build_federation(cfg)
    changed = tmp / "record_changed"
    (changed / ".hydra").mkdir(parents=True)
    save_checkpoint(changed / "checkpoint.pt", initial_state(fed), None, config_hash(cfg), digest(RESUMED, None, []))
    OmegaConf.save(OmegaConf.create([*RESUMED, "+hydra.callbacks.x._target_=builtins.print"]),
                   changed / ".hydra" / "overrides.yaml")

    disk = [*RESUMED, "algorithm=scaffold", "engine.client_state_device=disk"]
    cfg = make_cfg(*disk)
    fed, _ = build_federation(cfg)
    truncated = tmp / "disk_table_truncated"
    (truncated / ".hydra").mkdir(parents=True)
    state = initial_state(fed, truncated)
    run_round(fed, state)
    state.round += 1
    save_checkpoint(truncated / "checkpoint.pt", state, None, config_hash(cfg))
    OmegaConf.save(OmegaConf.create(disk), truncated / ".hydra" / "overrides.yaml")
    del state
    with open(truncated / "client_state" / "c.bin", "r+b") as f:
        f.truncate(f.seek(0, 2) // 2)
    assert torch.load(truncated / "checkpoint.pt", weights_only=True)["round"] == 1


# issue 32 (signals and one-line errors)
RESUMED = ["num_clients=4", "clients_per_round=2", "rounds=3", "tracking.artifacts=false"]


def make_issue32_fixtures(tmp: Path) -> None:
    """Malformed config files, and run folders whose checkpoint is not this run's: empty, another
    layout, other types, other shapes, a round beyond the run's (each refused at load, before training)."""
    import shutil

    (tmp / "conf_dir_bad_yaml" / "algorithm").mkdir(parents=True)
    (tmp / "conf_dir_bad_yaml" / "algorithm" / "mine.yaml").write_text("name: fedavg\n  oops: [1,\n")
    (tmp / "conf_dir_bare_value" / "algorithm").mkdir(parents=True)
    (tmp / "conf_dir_bare_value" / "algorithm" / "mine.yaml").write_text("42\n")
    shutil.copytree(CONF, tmp / "conf_bad_yaml")
    with open(tmp / "conf_bad_yaml" / "config.yaml", "a") as f:
        f.write("rounds: [\n")
    for kind in ("empty", "not_a_dict", "old_layout", "wrong_types", "wrong_shapes", "round_beyond"):
        bad_checkpoint(tmp / f"run_checkpoint_{kind}", kind)


def bad_checkpoint(run_dir: Path, kind: str) -> Path:
    """A run folder of RESUMED whose checkpoint.pt is damaged as `kind` says; returns the folder."""
    import torch
    from omegaconf import OmegaConf

    from fedbench.engine.checkpoint import save_checkpoint
    from fedbench.engine.loop import initial_state
    from fedbench.runs.build import build_federation
    from fedbench.runs.single import config_hash
    from tests.conftest import make_cfg

    cfg = make_cfg(*RESUMED)
    fed, _ = build_federation(cfg)
    (run_dir / ".hydra").mkdir(parents=True)
    OmegaConf.save(OmegaConf.create(RESUMED), run_dir / ".hydra" / "overrides.yaml")
    ckpt = run_dir / "checkpoint.pt"
    save_checkpoint(ckpt, initial_state(fed), None, config_hash(cfg))
    payload = torch.load(ckpt, weights_only=True)
    if kind == "empty":
        ckpt.write_bytes(b"")
        return run_dir
    if kind == "not_a_dict":
        payload = [1, 2]
    elif kind == "old_layout":
        del payload["tables"], payload["history"]
    elif kind == "wrong_types":
        payload["round"] = "3"
    elif kind == "round_beyond":  # resumed, it was a run FINISHED at once with nothing trained
        payload["round"] = 2**62
    else:
        payload["server"] = {"x": torch.zeros(3)}
    torch.save(payload, ckpt)
    return run_dir


def diagnose_command(line: str, tmp: Path) -> str:
    """The one-line message of a COMMAND_CASES line ('' when it has none), with tmp shown as <tmp>."""
    import contextlib
    import io
    import shlex

    import click

    from fedbench.cli.app import app
    from fedbench.core.errors import FedbenchError

    args = shlex.split(line.replace("{tmp}", str(tmp)))
    env = dict(a.split("=", 1) for a in args if "=" in a and a.split("=", 1)[0].isupper())  # FEDBENCH_CONF=... run
    args = args[len(env):]
    if args[0] == "run":
        return with_env(env, lambda: diagnose(" ".join(args[1:]), conf=None)).replace(str(tmp), "<tmp>")
    message, cwd, errors = "", os.getcwd(), io.StringIO()
    os.chdir(tmp)  # whatever a command writes by default lands in tmp
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(errors):
            app(args, standalone_mode=False, prog_name="fedbench")
    except FedbenchError as exc:
        message = str(exc)
    except click.ClickException as exc:
        message = exc.format_message()
    except SystemExit:  # a run that Hydra ran in this process reported its error line and exited
        lines = [x for x in errors.getvalue().splitlines() if x.startswith("error: ")]
        message = lines[-1].removeprefix("error: ") if lines else ""
    finally:
        os.chdir(cwd)
    return message.replace(str(tmp), "<tmp>")


def with_env(env: dict[str, str], call):
    """`call()` with the environment variables of a command line set (FEDBENCH_CONF read as the CLI reads it)."""
    from fedbench.config import compose

    saved, conf = {k: os.environ.get(k) for k in env}, compose.CONF_DIR
    os.environ.update(env)
    compose.CONF_DIR = compose.conf_dir_from_env()
    try:
        return call()
    finally:
        compose.CONF_DIR = conf
        for k, v in saved.items():
            os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)
