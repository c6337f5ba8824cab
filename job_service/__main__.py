from job_service.cli import main

main()
