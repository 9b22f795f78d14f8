"""Run infrastructure that the trainer, the planner and the probe share.

  workdir_lock.py  one run owns a work dir (run.lock): train, bench, plan,
                   study and probe hold it
  agreement.py     the processes of a run agree: the same run, the same
                   decisions at the same steps
  preemption.py    stop signals: a clean stop after a save, or at once
                   before anything is trained

It imports nothing of trainer/, planner/ or probe/.
"""
