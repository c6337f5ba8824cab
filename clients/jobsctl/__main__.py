from clients.jobsctl.cli import main

main()
