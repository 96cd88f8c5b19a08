#!/bin/bash
# Test accuracy of every baseline after ROUNDS rounds (default 100) on Fashion-MNIST, Dirichlet(0.3)
# over 100 clients, 10 per round, 2NN, one local epoch of batch 50 at eta_l = 0.05; each grid trained as one program (hydra/launcher=batched).
# Ends by printing the table (`fedbench report`) of this sweep's runs.
#   ROUNDS=20 bash scripts/baselines_fmnist.sh
set -u
ROUNDS=${ROUNDS:-100}
STORE=${STORE:-sqlite:////tmp/baselines_mlflow.db}
EXPERIMENT=${EXPERIMENT:-baselines-fmnist-r$ROUNDS}
COMMON=(dataset=fmnist partition=dirichlet partition.alpha=0.3 model=mlp_2nn num_clients=100 clients_per_round=10
        local_epochs=1 batch_size=50 eta_l=0.05 rounds="$ROUNDS" eval_every=1 seed=0 engine.threads=1
        tracking.uri="$STORE" tracking.experiment="$EXPERIMENT" tracking.skip_finished=false)
# one grid per server step size, each trained as one program (hydra/launcher=batched: the jobs share
# data set, split and model); every job is still its own MLflow run
for grid in "fedavg,fedprox,scaffold,scaffold/prox,feddyn,fedcm,dsgd,mime_svrg eta_g=1.0" \
            "fedavg/avgm eta_g=0.1" "fedavg/adam,fedavg/yogi,fedavg/adagrad eta_g=0.01"; do
  algorithms=${grid% *}
  fedbench run -m hydra/launcher=batched "${COMMON[@]}" algorithm="$algorithms" "${grid##* }" < /dev/null \
    || echo "some of $algorithms failed" >&2
done
fedbench report --uri "$STORE" --experiment "$EXPERIMENT" --setting eta_g --target 0.8 --baseline fedavg
