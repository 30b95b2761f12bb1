"""`tenure demo`: the seed's story played for real with worker processes, a proxy and a bank."""
