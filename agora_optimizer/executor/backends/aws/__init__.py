"""AWS Batch: each task attempt one Batch job on the job queue of its instance type or family.

``backend`` is the backend's calls (:class:`~agora_optimizer.executor.backends.aws.backend.AwsBatchBackend`);
beside it ``jobs`` (queue and job names, sizes, Batch's states), ``provisioning`` (setting up an account),
``credentials`` (Airflow's AWS connection) and ``errors`` (boto3's errors as BackendErrors).
"""
