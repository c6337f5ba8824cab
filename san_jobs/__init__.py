"""san-jobs, under one import name: the SDK (`san_jobs.client`), JobService
(`san_jobs.job_service`), AiGateway (`san_jobs.ai_gateway`), jobsctl, san-web, the
shared parts (`san_jobs.shared`) and the code generated from proto/ (`san_jobs.proto`).
Installed without extras, only the SDK's dependencies come with it."""
