"""nostall.ray: prep servers (`nostall serve`, docs/serve.md) placed as Ray
actors on a cluster's CPU nodes, their addresses handed to the loader.

    import ray, nostall, nostall.ray
    ray.init()                                    # or address="auto"
    pool = nostall.ray.PrepPool(4, "/data/train", secret_file="/shared/secret",
                                crop=224, seed=7, num_cpus=8)
    loader = nostall.Loader("/data/train", crop=224, seed=7, threads=2,
                            prep_servers=pool.addresses,
                            prep_secret_file="/shared/secret")
    ...
    pool.close()

Each actor runs one `nostall serve SOURCE [options] --secret-file FILE
--listen HOST:0` as its child process (the program found as the package
finds it: $NOSTALL_CLI, the package's own, the checkout's build/; resolved
on the driver and passed to the actors, so every node needs it at that
path, as it needs the dataset at SOURCE) and reports the HOST:PORT the
server printed. HOST is the actor's node's address (ray's node IP) unless
`host=` says otherwise (host="127.0.0.1" on one machine). The child gets
SIGKILL when the actor's process dies (PR_SET_PDEATHSIG), so a killed actor
takes its server with it: the loaders' items outstanding there go to the
other servers or their own threads (exactly once, the same bytes).

An actor is restarted by Ray (max_restarts, default unlimited) and its
server with it, on a new port; a server that exits under a live actor is
started again by the next health check. `replace_dead()` checks every
actor, waits for restarting ones, replaces an actor that is dead for good
with a new one, and returns the addresses (pass them to the next Loader;
a running loader keeps the addresses it was made with). The options are
the loader's (the ones that change an item's bytes must be the trainers');
`threads` defaults to the actor's `num_cpus`.

Ray is imported when a pool is made, not with this module: an ImportError
says `pip install ray` when it is missing. This module touches only Ray's
API, its actors' child processes and nostall's option table.
"""

import os

_RESERVED = ("listen", "secret_file", "prep_servers", "prep_secret_file", "progress")


def _ray():
    try:
        import ray
    except ImportError as e:
        raise ImportError("nostall.ray needs Ray, which is not importable here (%s): "
                          "pip install ray" % e) from e
    return ray


def _server_class():
    """The actor's class, defined here so that Ray pickles it by value: a
    worker needs neither nostall nor its path, only the program."""

    class PrepServer:
        def __init__(self, cli, source, secret_file, host, args):
            import uuid
            self._cmd = (cli, source, secret_file, host, list(args))
            self._proc = None
            self._address = None
            self._incarnation = uuid.uuid4().hex  # new with every (re)start of the actor
            self._start()

        def _start(self):
            import ctypes
            import signal
            import subprocess
            import tempfile

            cli, source, secret_file, host, args = self._cmd
            if host is None:
                import ray
                host = ray.util.get_node_ip_address()
            listen = ("[%s]:0" if ":" in host else "%s:0") % host

            def die_with_parent():  # in the child, before exec
                ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL))  # PDEATHSIG

            err = tempfile.TemporaryFile(mode="w+")
            cmd = [cli, "serve", source, *args, "--secret-file", secret_file, "--listen", listen]
            proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                    stderr=err, text=True, preexec_fn=die_with_parent)
            line = proc.stdout.readline()  # "listening on HOST:PORT", or EOF when it failed
            if not line.startswith("listening on "):
                proc.kill()
                proc.wait()
                err.seek(0)
                raise RuntimeError("nostall.ray.PrepPool: `%s` did not start: %s"
                                   % (" ".join(cmd), err.read().strip() or line.strip()
                                      or "exit status %s" % proc.returncode))
            self._proc = proc
            self._address = line.strip().rsplit(" ", 1)[1]

        def check(self):
            """(address, server pid, incarnation); a server that exited is
            started again first (a new port)."""
            if self._proc is None or self._proc.poll() is not None:
                self._start()
            return self._address, self._proc.pid, self._incarnation

        def stop(self):
            if self._proc is not None and self._proc.poll() is None:
                self._proc.terminate()
                self._proc.wait()
            return True

    return PrepServer


class PrepPool:
    """n `nostall serve` processes as Ray actors; see the module's text.

    n: actors (servers). source: the dataset, the same path on every node.
    secret_file: the shared secret's file (mode 0600) on every node.
    host: the address servers listen on (default: each node's IP).
    num_cpus: Ray CPUs per actor (and the server's threads unless given).
    max_restarts: Ray's, per actor (-1: unlimited).
    ray_options: more of Ray's actor options (resources, scheduling_strategy...).
    cli: the nostall program (default: found as `python -m nostall` finds it).
    timeout: seconds to wait for a server to start or answer a check.
    **options: the loader's options (crop=224, seed=7, task="detect", ...).
    """

    def __init__(self, n, source, *, secret_file, host=None, num_cpus=1, max_restarts=-1,
                 ray_options=None, cli=None, timeout=120, **options):
        ray = _ray()
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise ValueError("nostall.ray.PrepPool: n must be an int >= 1, got %r" % (n,))
        bad = [k for k in options if k in _RESERVED]
        if bad:
            raise ValueError("nostall.ray.PrepPool: %s set by the pool, not as an option"
                             % ", ".join(bad))
        from .__main__ import cli_path
        from .loader import _option_text

        self._ray = ray
        self._timeout = timeout
        options.setdefault("threads", num_cpus)
        args = []
        for name, value in options.items():
            args += ["--" + name.replace("_", "-"), _option_text(name, value)]
        self._spec = (cli or cli_path(), os.path.abspath(os.fsdecode(source)),
                      os.path.abspath(os.fsdecode(secret_file)), host, args)
        opts = dict(ray_options or {})
        opts.setdefault("num_cpus", num_cpus)
        opts["max_restarts"] = max_restarts
        opts["max_task_retries"] = -1 if max_restarts else 0  # a check waits for a restart
        self._cls = ray.remote(_server_class()).options(**opts)
        self._actors = [self._spawn() for _ in range(n)]
        self._addresses = [None] * n
        self._pids = [None] * n
        try:
            self.replace_dead()
        except BaseException:
            self.close()
            raise

    def _spawn(self):
        return self._cls.remote(*self._spec)

    @property
    def addresses(self):
        """The servers' HOST:PORT, as of the last check."""
        return list(self._addresses)

    @property
    def actors(self):
        """The Ray actor handles (ray.kill one to see a server fail)."""
        return list(self._actors)

    def server_pids(self):
        """The servers' process ids on their nodes, as of the last check."""
        return list(self._pids)

    def replace_dead(self):
        """Check every actor (and its server): wait for one Ray is
        restarting, start a server that exited again, replace an actor dead
        for good (restarts used up, or ray.kill(no_restart=True)) with a new
        one. Returns the addresses, new ones where a server was restarted."""
        ray = self._ray
        refs = [a.check.remote() for a in self._actors]
        for i, ref in enumerate(refs):
            try:
                got = ray.get(ref, timeout=self._timeout)
            except ray.exceptions.GetTimeoutError:
                raise TimeoutError("nostall.ray.PrepPool: prep server %d did not answer in %s s"
                                   % (i, self._timeout)) from None
            except ray.exceptions.RayActorError as e:
                if getattr(e, "actor_init_failed", False) or self._addresses[i] is None:
                    raise RuntimeError("nostall.ray.PrepPool: prep server %d failed: %s"
                                       % (i, e)) from e
                self._actors[i] = self._spawn()  # dead for good: a new one in its place
                got = ray.get(self._actors[i].check.remote(), timeout=self._timeout)
            self._addresses[i], self._pids[i] = got[0], got[1]
        return self.addresses

    def incarnations(self):
        """Each actor's incarnation (changes when Ray restarts it); waits
        for restarting actors like replace_dead()."""
        ray = self._ray
        return [g[2] for g in ray.get([a.check.remote() for a in self._actors],
                                      timeout=self._timeout)]

    def close(self):
        """Stop every server and kill the actors (no restart). Idempotent."""
        ray = self._ray
        actors, self._actors = self._actors, []
        for a in actors:
            try:
                ray.get(a.stop.remote(), timeout=self._timeout)
            except Exception:  # already dead: nothing to stop
                pass
            ray.kill(a, no_restart=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
