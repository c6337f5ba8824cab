from clients.web.cli import main

main()
