#!/usr/bin/env bash
# Pretrains a small ELECTRA end to end on the corpus shipped in pretrain_data/sample/, then
# fine-tunes it on the movie-review sentences shipped beside it:
# text -> TFRecords -> pretraining (checkpoints, TensorBoard, exported models) -> evaluation ->
# fine-tuning on SST-2-style sentiment (its results and a SavedModel that classifies new text).
# DATA_DIR (default ./demo_data) is laid out as google-research/electra's; rerunning resumes.
set -euo pipefail
cd "$(dirname "$0")"
DATA_DIR=${DATA_DIR:-demo_data}
HPARAMS=configs/hparams/quickstart.json

mkdir -p "$DATA_DIR/finetuning_data"
cp pretrain_data/sample/vocab.txt "$DATA_DIR/vocab.txt"
python pretrain_data/build_pretraining_dataset.py --corpus_dir pretrain_data/sample/corpus \
  --vocab_file "$DATA_DIR/vocab.txt" --output_dir "$DATA_DIR/pretrain_tfrecords" \
  --max_seq_length 128 --num_out_files 8 --overwrite
python run_pretraining.py --data_dir "$DATA_DIR" --model_name quickstart --hparams "$HPARAMS"
# Evaluation: every hparam not given is the finished run's (its pretrain_config.json).
python run_pretraining.py --data_dir "$DATA_DIR" --model_name quickstart \
  --hparams '{"do_train": false, "do_eval": true}'
cp -r pretrain_data/sample/finetuning_data/sst "$DATA_DIR/finetuning_data/"
python run_finetuning.py --data_dir "$DATA_DIR" --model_name quickstart \
  --hparams '{"task_names": ["sst"]}'
echo "TensorBoard: tensorboard --logdir $DATA_DIR/models/quickstart"
echo "The fine-tuned classifier: $DATA_DIR/models/quickstart/finetuning_models/sst_model_1/saved_model"
