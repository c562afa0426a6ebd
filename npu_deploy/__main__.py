from npu_deploy.import_path import leave_the_checkout

leave_the_checkout()

from .launch import main  # noqa: E402

main()
