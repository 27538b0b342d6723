"""What tests share, as plain code (fixtures live in the conftest.py files and call these):

    paths        ROOT of the checkout, the shipped DEMO_SPACE
    env          isolate: a home of the test's own, the user's NCCL/SGLang/sweeper knobs removed
    ports        free_port (the kernel's pick), free_port_on (the first port a Host calls free)
    waiting      wait_for: poll a predicate until it is truthy or a deadline passes
    spaces       TINY_SPACE and the spaces built from it; line_of (a line's number in a YAML text)
    samples      RequestSample builders for the pure metrics tests
    fake_servers ThreadedApp (an aiohttp app on its own loop in a thread) and the fake completion server
    sim          a real `python -m sweeper.sim` process and the simulator configs tests launch
    cli          the CLI as a user runs it (a subprocess in a scratch folder) and reading its results
    faults       SIGKILL a command at chosen moments and resume it; stop_servers_under (what a failed test left)
    hosts        local_host, ssh_host (the test sshd as host "box")
    sshd         a real OpenSSH server on 127.0.0.1 with throwaway keys; the nvidia-smi stand-in
    pg           a private PostgreSQL cluster
    llamacpp     where the real llama-server binary is, and the mark that skips without it

No module here imports a test module or a conftest.py."""
